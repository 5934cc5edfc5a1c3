"""The chaos soak's short lane: bench/chaos/core.py on the session's cluster with a fixed
seed, about three minutes, a handful of overlapping faults over three job slots of the
stand-in and spec kinds; no invariant may break, and no shipped alert fires that the
faults do not explain (a prometheus scrapes the replicas). Two node agents are added for it (node
faults act on them and the session's own node alike) and removed after. Its name sorts
after test_install.py: the cluster's modules run in name order, and the chart's
operator test must run before anything starts the harness's operator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.chaos import jobkinds
from bench.chaos import schedule as s
from bench.chaos.core import Soak, SoakConfig
from tests.e2e.harness import Env, wait_for
from tests.localcluster.nodeagent.agent import NodeConfig

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

SEED = 11
NODES = ("chaos-a", "chaos-b")


def test_a_short_soak_breaks_no_invariant(e2e: Env, tmp_path: Path):
    config = SoakConfig(
        duration=180,
        seed=SEED,
        jobs=3,
        max_faults=6,
        settle_seconds=360,
        job_kinds=(jobkinds.STANDIN, jobkinds.STANDIN, jobkinds.SPEC),
        fault_kinds=(s.POD_SIGKILL, s.POD_SIGTERM, s.POD_EVICT, s.NODE_DRAIN,
                     s.OPERATOR_KILL, s.PROGRESS_CONFIGMAP_DELETE, s.SUSPEND_RESUME),
    )  # fmt: skip
    for node in NODES:
        e2e.cluster.add_node(NodeConfig(name=node, gpus=4))
    try:
        result = Soak(e2e.cluster, e2e.kubectl, tmp_path, config).run()
    finally:
        for node in NODES:
            e2e.cluster.remove_node(node)
    (tmp_path / "chaos.json").write_text(json.dumps(result, indent=1))
    injected = [f for f in result["faults"] if f["outcome"] == "injected"]
    assert len(injected) >= 2 and result["overlapping"] >= 1, result["faults"]
    hit = {v["namespace"] for v in result["violations"]}
    faults = [f for f in result["faults"] if f.get("namespace") in hit or not f.get("namespace")]
    assert not result["violations"], json.dumps([result["violations"], faults], indent=1)
    assert all(job["phase"] == "Succeeded" for job in result["jobs"]), result["jobs"]
    assert result["alerts_scrapes"] > 10, "prometheus scraped no replica: no alert was judged"
    wait_for(e2e.operator.leads, 120,
             "the session's operator leading again")  # fmt: skip
