"""Elastic shapes on the real control plane.

- In place: a job running on 2 of the node's 4 GPUs is preempted by a pod that takes
  and keeps 3; its 2-GPU group stays unschedulable, so after `elastic.waitSeconds` the
  operator recreates it with 1 GPU and the trainer resumes from its checkpoint on 1
  replica instead of 2. When the pod gives its GPUs back, the probe of the GPU it lacks
  beside its pod is scheduled and the job moves back to 2 GPUs (its trainer checkpoints
  on SIGTERM), resumes again and completes.
- Across nodes: a 2-worker MultiWorkerMirrored group fills `gpu-node-0` (4 GPUs); the
  node is drained (cordoned, its pods evicted) while a 2-GPU node is free. The group
  becomes one pod of 2 GPUs on the other node and resumes there; a job without
  `elastic` keeps waiting for its shape. The node comes back, the probe of the 2x2
  shape's second worker is scheduled on it and the job moves back to two workers and
  completes. (That a move up checkpoints at the step it stops - SIGTERM, exit 75 - and
  resumes there is the trainer's guarantee, tested in tests/trainer.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.harness import SEARCH, Env, condition, wait_for
from tests.localcluster import disruption
from tests.localcluster.nodeagent.agent import NodeConfig

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

ELASTIC: dict[str, Any] = {
    "gpusPerWorker": 2,
    "elastic": {"shapes": [{"gpusPerWorker": 1}], "waitSeconds": 10},
}
TWO_WORKERS: dict[str, Any] = {
    "workers": 2,
    "gpusPerWorker": 2,
    "elastic": {"shapes": [{"workers": 1, "gpusPerWorker": 2}], "waitSeconds": 10},
}
BIG, SMALL = "gpu-node-0", "gpu-small"


def test_a_preempted_job_resumes_on_the_gpus_that_are_free(e2e: Env) -> None:
    ns = e2e.namespace("elastic")
    gpus = int(e2e.cluster.core.read_node("gpu-node-0").status.allocatable["nvidia.com/gpu"])
    assert gpus == 4
    # Twice SEARCH's trials: the search must outlast two shape changes.
    e2e.submit(ns, distribution=ELASTIC, tuner={**SEARCH["tuner"], "hyperbandIterations": 2})
    e2e.wait_mid_trial(ns)
    assert e2e.status(ns)["shape"]["name"] == "1x2"
    # Takes 3 of the 4 GPUs, preempting the trainer, and keeps them.
    preemptor = disruption.preempt_with_priority(e2e.cluster.api, ns, 3)
    shrunk = e2e.wait_status(
        ns, lambda s: (s.get("shape") or {}).get("index") == 1, 180, "the 1x1 shape"
    )
    assert shrunk["shape"] == {
        "index": 1, "name": "1x1", "workers": 1, "gpusPerWorker": 1, "gpus": 1,
    }  # fmt: skip
    restored = e2e.wait_status(ns, lambda s: s.get("restores", 0) >= 1, 240, "the restore")
    resumed = restored["progress"]
    assert (resumed["resumedFromEpoch"], resumed["resumedFromStep"]) > (0, 0), resumed
    pod = e2e.cluster.pod(ns, "search-worker-0")
    assert pod is not None and pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    wide = e2e.kubectl("get", "tj", "search", "-n", ns, "-o", "wide").stdout
    assert "SHAPE" in wide.splitlines()[0] and "1x1" in wide.splitlines()[1], wide
    # The GPUs come back: the probe beside the pod is scheduled, the job moves back up.
    e2e.cluster.core.delete_namespaced_pod(preemptor, ns, grace_period_seconds=0)
    back = e2e.wait_status(
        ns, lambda s: (s.get("shape") or {}).get("index") == 0, 180, "back to 1x2"
    )
    assert back["preemptions"] == 1  # moving up is no preemption
    final = e2e.wait_phase(ns, "Succeeded", timeout=400)
    assert final["preemptions"] == 1 and final["failures"] == 0
    assert final["shape"]["name"] == "1x2" and final["restores"] >= 1
    reasons = e2e.reasons(ns)
    assert reasons.count("ShapeChanged") == 2 and reasons[-1] == "Completed", reasons
    down, up = (e for e in e2e.kubectl.events(ns, "search") if e["reason"] == "ShapeChanged")
    assert "(1x2) Unschedulable for" in down["message"], down
    assert "as 1x1, elastic shape 1 of 1" in down["message"], down
    assert "own shape 1x2 fits again (its probe was scheduled on gpu-node-0)" in up["message"]
    wait_for(
        lambda: (
            not [p for p in e2e.kubectl.pods(ns, "search") if "-probe-" in p["metadata"]["name"]]
        ),
        60,
        "the probe's deletion",
    )


def nodes_of(e2e: Env, ns: str, job: str = "search") -> dict[str, str]:
    """Trainer pod → node of the job's pods that are not being deleted."""
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in e2e.kubectl.pods(ns, job)
        if not p["metadata"].get("deletionTimestamp") and "-probe-" not in p["metadata"]["name"]
    }


def test_a_two_worker_group_on_a_drained_node_shrinks_to_one_pod_on_another(e2e: Env) -> None:
    ns = e2e.namespace("elastic-nodes")
    e2e.cluster.add_node(NodeConfig(name=SMALL, gpus=2))
    try:
        e2e.kubectl("cordon", SMALL)  # the job starts on BIG
        e2e.submit(
            ns, distribution=TWO_WORKERS, tuner={**SEARCH["tuner"], "hyperbandIterations": 2}
        )
        e2e.wait_mid_trial(ns)
        assert nodes_of(e2e, ns) == {"search-worker-0": BIG, "search-worker-1": BIG}
        assert e2e.status(ns)["shape"]["name"] == "2x2"
        # `kubectl drain`: cordoned, then its pods evicted through the Eviction API
        e2e.kubectl("cordon", BIG)
        e2e.kubectl("uncordon", SMALL)
        for pod in nodes_of(e2e, ns):
            disruption.evict_pod(e2e.cluster.api, ns, pod)
        # A job without elastic shapes keeps waiting for its own (4 GPUs in one pod: it
        # takes none of the 2-GPU node's, which a 2x2 group's first pod would).
        e2e.submit(ns, "fixed", distribution={"gpusPerWorker": 4})
        shrunk = e2e.wait_status(
            ns, lambda s: (s.get("shape") or {}).get("index") == 1, 180, "the 1x2 shape"
        )
        assert shrunk["shape"]["name"] == "1x2" and shrunk["preemptions"] == 1
        restored = e2e.wait_status(ns, lambda s: s.get("restores", 0) >= 1, 240, "the restore")
        resumed = restored["progress"]
        assert (resumed["resumedFromEpoch"], resumed["resumedFromStep"]) > (0, 0), resumed
        assert nodes_of(e2e, ns) == {"search-worker-0": SMALL}
        pod = e2e.cluster.pod(ns, "search-worker-0")
        assert pod is not None and pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
        tf_config = [e for e in pod.spec.containers[0].env or [] if e.name == "TF_CONFIG"]
        assert tf_config == []  # one pod: MirroredStrategy over its 2 GPUs
        fixed = e2e.status(ns, "fixed")
        assert fixed["phase"] == "Pending" and "shape" not in fixed, fixed
        assert condition(fixed, "Running").get("reason") == "Unschedulable", fixed
        assert "ShapeChanged" not in e2e.reasons(ns, "fixed")
        e2e.kubectl("delete", "tj", "fixed", "-n", ns, "--wait=false")
        wait_for(lambda: not e2e.kubectl.pods(ns, "fixed"), 60, "fixed's pod gone")
        # The node is back: the 2x2 probe is scheduled on it, the job moves back up.
        e2e.kubectl("uncordon", BIG)
        e2e.wait_status(ns, lambda s: (s.get("shape") or {}).get("index") == 0, 180, "2x2")
        final = e2e.wait_phase(ns, "Succeeded", timeout=400)
        assert final["preemptions"] == 1 and final["failures"] == 0 and final["restores"] >= 1
        down, up = (e for e in e2e.kubectl.events(ns, "search") if e["reason"] == "ShapeChanged")
        assert "(2x2) Unschedulable for" in down["message"], down
        assert f"own shape 2x2 fits again (its probe was scheduled on {BIG})" in up["message"]
    finally:
        e2e.kubectl("uncordon", BIG, check=False)
        e2e.cluster.remove_node(SMALL)
