"""TuningJobs admitted by a real Kueue (v0.17, built from the module proxy; its manager
runs against the local control plane, tests/localcluster/kueue.py): queued before any
GPU is used, admitted whole, evicted and re-admitted, resuming where they stopped.

(The job without Kueue installed is in test_operator_stuck.py, which runs before the
`kueue` fixture first starts Kueue in a session.)"""

from __future__ import annotations

import time
from typing import Any

import pytest
from tuneop.api import queue as kq

from tests.e2e.harness import SEARCH, Env, condition, wait_for, wait_mid_epoch
from tests.localcluster.kueue import API, Kueue

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

GPU = "nvidia.com/gpu"
QUEUED = {kq.QUEUE_LABEL: "lq"}
"""The labels of a TuningJob sent to LocalQueue `lq`."""
LOW, HIGH = "tuneop-e2e-low", "tuneop-e2e-high"
FLAVOR, FLAVOR_LABEL, FLAVOR_VALUE = "gpu-node-0-gpus", "kubernetes.io/hostname", "gpu-node-0"
"""The queues' ResourceFlavor: Kueue puts its node labels on the pods it admits."""


@pytest.fixture
def queue_ns(e2e: Env, kueue: Kueue) -> str:
    """A namespace with LocalQueue `lq` on a ClusterQueue of the node's 4 GPUs, which
    preempts lower priorities within itself."""
    ns = e2e.namespace("kq")
    cq = f"cq-{ns}"
    e2e.cluster.apply(
        *(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name}, "value": value}
            for name, value in ((LOW, 100), (HIGH, 1000))
        ),
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
         "spec": {"nodeLabels": {FLAVOR_LABEL: FLAVOR_VALUE}}},
        {
            "apiVersion": API,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{
                    "coveredResources": ["cpu", "memory", GPU],
                    "flavors": [{"name": FLAVOR, "resources": [
                        {"name": "cpu", "nominalQuota": "16"},
                        {"name": "memory", "nominalQuota": "64Gi"},
                        {"name": GPU, "nominalQuota": 4},
                    ]}],
                }],
            },
        },
        {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
         "spec": {"clusterQueue": cq}},
    )  # fmt: skip
    wait_for(
        lambda: "True"
        in e2e.kubectl(
            "get", "localqueue", "lq", "-n", ns, "-o",
            "jsonpath={.status.conditions[?(@.type=='Active')].status}", check=False,
        ).stdout,
        60,
        "LocalQueue lq active",
    )  # fmt: skip
    return ns


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def holding_pod(name: str, ns: str, gpus: int, priority_class: str | None = None) -> dict[str, Any]:
    """A queued plain pod that idles holding `gpus` GPUs (a neighbour's workload)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {kq.QUEUE_LABEL: "lq"}},
        "spec": {
            **({"priorityClassName": priority_class} if priority_class else {}),
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "hold", "image": "tuneop/pause", "command": ["sleep", "infinity"],
                "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
            }],
        },
    }  # fmt: skip


def short_search(trials: int) -> dict[str, Any]:
    """SEARCH's spec with a random search of `trials` one-epoch trials: a job that holds
    its quota for seconds of TensorFlow, not minutes."""
    tuner = {k: v for k, v in SEARCH["tuner"].items() if k not in ("factor", "hyperbandIterations")}
    return {**SEARCH, "tuner": {**tuner, "algorithm": "RandomSearch", "maxTrials": trials,
                                "maxEpochs": 1}}  # fmt: skip


def test_two_jobs_on_a_four_gpu_queue_run_one_after_the_other(e2e: Env, queue_ns: str):
    ns = queue_ns
    four = {"gpusPerWorker": 4}
    e2e.submit(ns, "first", search=short_search(2), labels=QUEUED, distribution=four)
    e2e.wait_phase(ns, "Running", timeout=120, name="first")
    e2e.submit(ns, "second", search=short_search(1), labels=QUEUED, distribution=four)
    status = e2e.wait_status(
        ns, lambda s: condition(s, "Queued").get("status") == "True", 60, "second Queued",
        name="second",
    )  # fmt: skip
    assert status["phase"] == "Pending"
    assert "LocalQueue lq" in condition(status, "Queued")["message"]
    (pod,) = e2e.kubectl.pods(ns, "second")
    assert kq.ADMISSION_GATE in gates(pod) and pod["status"].get("phase") == "Pending"
    assert "Stalled" not in e2e.reasons(ns, "second")
    e2e.wait_phase(ns, "Succeeded", timeout=400, name="first")
    final = e2e.wait_phase(ns, "Succeeded", timeout=400, name="second")
    assert condition(final, "Queued")["status"] == "False"
    assert final["preemptions"] == 0 and final["failures"] == 0


LONG_DATA = {**SEARCH["data"], "synthetic": {"samples": 3072, "seed": 0}}
"""72 steps an epoch: Kueue's eviction (a scheduling cycle, then a graceful delete) takes
longer than what is left of one of SEARCH's 18-step epochs."""
LONG_STEPS = 3072 * 3 // 4 // 32


def test_kueue_preempts_a_job_mid_trial_it_resumes_once_readmitted(e2e: Env, queue_ns: str):
    ns = queue_ns
    e2e.submit(ns, "undisturbed", labels=QUEUED, data=LONG_DATA, priorityClassName=LOW)
    reference = e2e.wait_phase(ns, "Succeeded", timeout=600, name="undisturbed")
    e2e.submit(ns, "search", labels=QUEUED, data=LONG_DATA, priorityClassName=LOW)
    e2e.wait_phase(ns, "Running", timeout=120)
    at = wait_mid_epoch(e2e.kubectl, ns, "search", LONG_STEPS, timeout=300, min_step=4)
    e2e.kubectl.apply(holding_pod("urgent", ns, 4, HIGH))
    status = e2e.wait_status(ns, lambda s: s.get("preemptions", 0) >= 1, 120, "the eviction")
    assert status["queueEvictions"] == 1 and status["failures"] == 0
    events = e2e.kubectl.events(ns, "search")
    preempted = [e["message"] for e in events if e["reason"] == "Preempted"]
    assert preempted and "EvictedByKueue" in preempted[0], preempted
    queued = e2e.wait_status(
        ns, lambda s: condition(s, "Queued").get("status") == "True", 60, "queued again"
    )
    assert queued["phase"] == "Pending"
    e2e.kubectl("delete", "pod", "urgent", "-n", ns, "--wait=false")
    restored = e2e.wait_status(ns, lambda s: s.get("restores", 0) >= 1, 240, "the restore")
    where = {k: v for k, v in restored["progress"].items() if k.startswith("resumed")}
    assert restored["progress"]["resumedFromStep"] > 0, (where, at)
    final = e2e.wait_phase(ns, "Succeeded", timeout=600)
    assert final["preemptions"] == 1 and final["queueEvictions"] == 1
    assert final["failures"] == 0 and final["restores"] == 1
    assert final["bestTrial"]["id"] == reference["bestTrial"]["id"]
    assert final["bestTrial"]["score"] == reference["bestTrial"]["score"]
    goodput = final["goodput"]
    assert goodput["recoveries"] == 1 and 0 < goodput["percent"] < 100, goodput


def test_a_two_worker_job_is_admitted_whole(e2e: Env, queue_ns: str):
    ns = queue_ns
    e2e.kubectl.apply(holding_pod("neighbour", ns, 2))  # half of the quota taken
    wait_for(
        lambda: not gates(e2e.kubectl.json("get", "pod", "neighbour", "-n", ns)),
        60,
        "the neighbour admitted",
    )
    e2e.submit(ns, "pair", labels=QUEUED, distribution={"workers": 2, "gpusPerWorker": 2})
    e2e.wait_status(
        ns, lambda s: condition(s, "Queued").get("status") == "True", 60, "pair Queued",
        name="pair",
    )  # fmt: skip
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:  # 2 GPUs are free, but never one worker of two
        pods = e2e.kubectl.pods(ns, "pair")
        assert len(pods) == 2 and all(kq.ADMISSION_GATE in gates(p) for p in pods), pods
        time.sleep(0.5)
    e2e.kubectl("delete", "pod", "neighbour", "-n", ns, "--wait=false")
    e2e.wait_phase(ns, "Running", timeout=120, name="pair")
    pods = e2e.kubectl.pods(ns, "pair")
    assert all(not gates(p) for p in pods)
    group = {p["metadata"]["labels"][kq.POD_GROUP_LABEL] for p in pods}
    assert len(group) == 1  # one Kueue pod group
    e2e.kubectl("delete", "tj", "pair", "-n", ns, "--wait=false")


def workloads(e2e: Env, ns: str) -> dict[str, dict[str, Any]]:
    return {
        w["metadata"]["name"]: w for w in e2e.kubectl.json("get", "workloads", "-n", ns)["items"]
    }


def admission(e2e: Env, ns: str, workload: str) -> dict[str, Any] | None:
    """The flavors and resource usage Kueue admitted `workload` with; None while it is
    not admitted, or once it is gone (Kueue deletes a pod group's Workload with its
    last pod)."""
    found = workloads(e2e, ns).get(workload) or {}
    admitted = (found.get("status") or {}).get("admission")
    if not admitted:
        return None
    (assignment,) = admitted["podSetAssignments"]
    return {k: assignment[k] for k in ("flavors", "resourceUsage")}


def test_a_queued_elastic_job_shrinks_into_the_quota_left_and_moves_back_up(
    e2e: Env, queue_ns: str
):
    """The queue has 4 GPUs, a neighbour holds 3: a 2-GPU job stays Queued, and after
    waitSeconds becomes a 1-GPU pod group - a new Workload, admitted in the flavor Kueue
    picks (its node labels on the pod). The neighbour goes: the job's probe, a Kueue pod
    group of the GPU it lacks, is admitted and bound beside the pod, and the job moves
    back to 2 GPUs as one more Workload. The first 2-GPU Workload never takes quota: it is
    not admitted while queued, and goes with its released pod."""
    ns = queue_ns
    e2e.kubectl.apply(holding_pod("neighbour", ns, 3))
    wait_for(
        lambda: not gates(e2e.kubectl.json("get", "pod", "neighbour", "-n", ns)),
        60,
        "the neighbour admitted",
    )
    elastic = {"gpusPerWorker": 2, "elastic": {"shapes": [{"gpusPerWorker": 1}], "waitSeconds": 10}}
    e2e.submit(ns, search=short_search(8), labels=QUEUED, distribution=elastic)
    (first,) = wait_for(lambda: e2e.kubectl.pods(ns, "search"), 60, "the first pod")
    queued = first["metadata"]["labels"][kq.POD_GROUP_LABEL]
    # Kueue has the 2-GPU Workload and keeps it without quota until the job shrinks.
    wait_for(lambda: queued in workloads(e2e, ns), 60, f"Workload {queued}")
    while (e2e.status(ns).get("shape") or {}).get("index") != 1:
        assert admission(e2e, ns, queued) is None
        time.sleep(0.5)
    down = wait_for(
        lambda: next(
            (e for e in e2e.kubectl.events(ns, "search") if e["reason"] == "ShapeChanged"), None
        ),
        30,
        "the ShapeChanged Event",
    )
    assert "(1x2) Queued for" in down["message"], down
    assert e2e.status(ns)["shape"]["name"] == "1x1"
    # Released with its pod: Kueue deletes the Workload, which can take no quota now.
    wait_for(lambda: queued not in workloads(e2e, ns), 60, f"Workload {queued} gone")
    e2e.wait_phase(ns, "Running", timeout=120)
    (pod,) = e2e.kubectl.pods(ns, "search")
    smaller = pod["metadata"]["labels"][kq.POD_GROUP_LABEL]
    assert smaller != queued and not gates(pod)
    assert pod["spec"]["containers"][0]["resources"]["limits"][GPU] == "1"
    assert pod["spec"]["nodeSelector"][FLAVOR_LABEL] == FLAVOR_VALUE  # Kueue's flavor
    assert admission(e2e, ns, smaller) == {"flavors": {GPU: FLAVOR}, "resourceUsage": {GPU: "1"}}
    e2e.kubectl("delete", "pod", "neighbour", "-n", ns, "--wait=false")
    probe = wait_for(
        lambda: next(
            (p for p in e2e.kubectl.pods(ns, "search") if "-probe-" in p["metadata"]["name"]),
            None,
        ),
        60,
        "the probe",
    )
    group = probe["metadata"]["labels"][kq.POD_GROUP_LABEL]
    assert probe["metadata"]["labels"][kq.QUEUE_LABEL] == "lq" and group not in (queued, smaller)
    assert probe["spec"]["containers"][0]["resources"]["limits"][GPU] == "1"
    e2e.wait_status(ns, lambda s: (s.get("shape") or {}).get("index") == 0, 120, "back to 1x2")
    final = e2e.wait_phase(ns, "Succeeded", timeout=300)
    assert final["preemptions"] == 0 and final["failures"] == 0
    up = [e for e in e2e.kubectl.events(ns, "search") if e["reason"] == "ShapeChanged"][-1]
    assert "own shape 1x2 fits again (its probe was scheduled on gpu-node-0)" in up["message"]
    (pod,) = e2e.kubectl.pods(ns, "search")
    own = pod["metadata"]["labels"][kq.POD_GROUP_LABEL]
    assert own not in (queued, smaller, group)
    assert admission(e2e, ns, own) == {"flavors": {GPU: FLAVOR}, "resourceUsage": {GPU: "2"}}
