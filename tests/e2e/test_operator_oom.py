"""A trial whose hyperparameters need more memory than the pod's limit: the node agent
(its memory-limit emulation, tests/localcluster/nodeagent/memory.py) kills the trainer
and reports it OOMKilled, as the kubelet does; the operator records that trial, the
next trainer marks it FAILED in the oracle, and the search completes with the others."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tuneop_contract import RESULTS_FILE

from tests.e2e.harness import Env
from tests.e2e.oom_models import BALLAST_MB

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

TUNER: dict[str, Any] = {
    # each value of BALLAST_MB once, in the seed's order (RandomSearch never repeats one)
    "algorithm": "RandomSearch",
    "objective": {"name": "val_accuracy", "direction": "max"},
    "maxTrials": len(BALLAST_MB),
    "maxEpochs": 1,
    "seed": 7,
    "batchSize": 8,
}


def test_a_trial_that_runs_out_of_memory_is_failed_and_the_search_completes(e2e: Env):
    ns = e2e.namespace("oom")
    e2e.submit(
        ns,
        hypermodel="tests.e2e.oom_models:BallastHyperModel",
        data={"synthetic": {"samples": 80, "seed": 3}, "validationSplit": 0.2},
        tuner=TUNER,
        resources={"limits": {"memory": "2Gi"}},
    )
    final = e2e.wait_phase(ns, "Succeeded", timeout=300)
    assert final["trialOOMs"] == 1 and final["failures"] == 0, final
    [oom] = final["oomTrials"]
    results = json.loads((e2e.claim_dir(ns) / RESULTS_FILE).read_text())
    trials = {t["trialId"]: t for t in results["trials"]}
    assert len(trials) == len(BALLAST_MB), trials
    assert trials[oom]["status"] == "FAILED", trials[oom]
    assert trials[oom]["hyperparameters"]["ballast_mb"] == max(BALLAST_MB)
    assert [t["status"] for tid, t in trials.items() if tid != oom] == ["COMPLETED"] * 2
    assert results["best"]["trialId"] != oom
    assert final["trialsCompleted"] == 2, final
    events = [e for e in e2e.kubectl.events(ns, "search") if e["reason"] == "TrialOutOfMemory"]
    assert len(events) == 1 and f"trial {oom} ran out of memory" in events[0]["message"], events
    assert "2Gi" in events[0]["message"]
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--wait=false")
