"""Kueue through its plain-pod integration: what the operator puts on queued pods, how
it reads Kueue's gates and evictions, and when it declares a pod group over."""

from __future__ import annotations

from typing import Any

from tuneop.api import queue
from tuneop.api import status as st
from tuneop.api.groups import pod_groups
from tuneop.decide.classify import Outcome, classify
from tuneop.render import trainer_pods
from tuneop_contract.spec import JobSpec

from tests.unit.operator_world import QUEUE, World, admit, gate, observed, start


def queued_world(**spec: Any) -> World:
    w = World(**spec)
    w.job["metadata"]["labels"] = dict(QUEUE)
    w.job["metadata"]["uid"] = "abcdef-123"
    return w


def test_queued_pods_carry_the_queue_and_one_pod_group_per_attempt():
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "abcdef-1", "labels": QUEUE}}
    spec = JobSpec.from_dict({"image": "i", "hypermodel": "m:H", "distribution": {"workers": 2}})
    pods = [trainer_pods.build_pod(job, spec, i, 3) for i in range(2)]
    for pod in pods:
        assert pod["metadata"]["labels"][queue.QUEUE_LABEL] == "team-a"
        assert pod["metadata"]["labels"][queue.POD_GROUP_LABEL] == "j-abcde-3"
        assert pod["metadata"]["annotations"] == {queue.POD_GROUP_TOTAL: "2"}
    parallel = JobSpec.from_dict({"image": "i", "hypermodel": "m:H", "parallelTrials": 2})
    oracle, t0, _ = pod_groups("j", parallel)
    names = {
        trainer_pods.build_pod(job, parallel, 0, 1, group=g)["metadata"]["labels"][
            queue.POD_GROUP_LABEL
        ]
        for g in (oracle, t0)
    }
    assert names == {"j-abcde-oracle-1", "j-abcde-t0-1"}
    long = {"metadata": {"name": "x" * 45, "uid": "u" * 36, "labels": QUEUE}}
    assert len(queue.pod_group_name(long, "t63", 12345)) <= 63
    plain = trainer_pods.build_pod(
        {**job, "metadata": {**job["metadata"], "labels": {}}}, spec, 0, 0
    )
    assert queue.QUEUE_LABEL not in plain["metadata"]["labels"]
    assert "annotations" not in plain["metadata"]


def test_a_pod_kueue_evicted_is_a_preemption():
    pod = {
        "metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "phase": "Failed",
            "conditions": [
                {
                    "type": "TerminationTarget",
                    "status": "True",
                    "reason": "WorkloadEvictedDueToPreempted",
                }
            ],
            "containerStatuses": [
                {"name": "trainer", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
            ],
        },
    }
    c = classify(pod)
    assert c.outcome == Outcome.PREEMPTED and c.reason == queue.EVICTED_BY_KUEUE
    assert c.message == "WorkloadEvictedDueToPreempted"


def test_a_queued_job_is_queued_not_stalled_then_runs():
    w = queued_world(pendingTimeoutSeconds=10)
    w.step()
    gate(w)
    d = w.step()
    queued = w.condition(st.COND_QUEUED)
    assert queued["status"] == "True" and "LocalQueue team-a" in queued["message"]
    assert w.status["phase"] == st.PHASE_PENDING
    assert w.condition(st.COND_RUNNING)["reason"] == "Queued"
    assert not d.release_pods  # its group is the one that runs
    w.step(60)
    # waiting in a queue is no stall
    assert not st.condition_is(w.status.get("conditions") or [], st.COND_STALLED)
    admit(w)
    w.step()
    assert w.condition(st.COND_QUEUED)["status"] == "False"
    assert w.status["phase"] == st.PHASE_RUNNING


def test_kueue_s_message_comes_from_the_workload():
    w = queued_world()
    w.step()
    gate(w)
    name = queue.workload_name(next(iter(w.pods.values())))
    assert name == "j-abcde-0"
    from tuneop.decide.reconcile import decide

    workload = {
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "message": "insufficient quota"}
            ]
        }
    }
    d = decide(observed(w.job, list(w.pods.values()), now=w.now, workloads={name: workload}))
    queued = st.get_condition(d.status["conditions"], st.COND_QUEUED)
    assert queued is not None and queued["message"] == "LocalQueue team-a: insufficient quota"


def test_an_evicted_group_is_counted_released_and_queued_again():
    w = queued_world()
    start(w)
    w.terminate("j-worker-0", 75)  # SIGTERM: checkpointed, then exit 75
    pod = w.pods["j-worker-0"]
    pod["metadata"]["finalizers"] = [queue.FINALIZER]
    pod["status"]["conditions"] = [
        {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted"}
    ]
    pod["metadata"]["deletionTimestamp"] = st.rfc3339(w.now)  # Kueue deletes it
    d = w.step()
    assert w.status["preemptions"] == 1 and w.status["queueEvictions"] == 1
    assert w.status["failures"] == 0
    assert "WorkloadEvictedDueToPreempted" in w.events[-1][2]
    assert [r.name for r in d.release_pods] == ["j-worker-0"]  # its Workload is over
    w.pods["j-worker-0"]["metadata"]["annotations"] = {queue.RETRIABLE: "false"}
    d = w.step()
    assert not d.release_pods  # released once


def test_a_suspended_queued_job_gives_its_quota_back():
    w = queued_world()
    start(w)
    for pod in w.pods.values():
        pod["metadata"]["finalizers"] = [queue.FINALIZER]
    w.job["spec"]["suspend"] = True
    d = w.step()
    assert [r.name for r in d.release_pods] == ["j-worker-0"]
    assert [r.name for r in d.delete_pods] == ["j-worker-0"]


def test_pods_created_before_their_group_was_recorded_are_not_released():
    """The executor creates pods before it writes `attemptStarted`; a pass that re-reads
    after a conflict sees them as the current attempt's, not as leftovers."""
    w = queued_world()
    d = w.step()
    gate(w)
    w.job["status"]["attemptStarted"] = False  # the status patch was lost
    d = w.step()
    assert not d.release_pods
