"""Every way a job can be stuck is visible: the pending reason in condition Running,
Stalled once it lasts (pendingTimeoutSeconds), the stall policy, the phase during a
replacement, a pod the API server refuses."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from tuneop.act import executor
from tuneop.api import status as st
from tuneop.api.spec import job_spec
from tuneop.decide.classify import Outcome, classify, pending_reason
from tuneop.decide.desired import rendered
from tuneop.decide.patch import Decision
from tuneop.decide.refusal import CHILD_CONFLICT, POD_REJECTED

from tests.unit.fakes import JOB, QUOTA_REFUSAL, FakeKube, stored_object
from tests.unit.operator_world import UNSCHEDULABLE, World, start, unschedulable


def waiting(reason: str, message: str = "", init: bool = False) -> dict[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    state = {"waiting": {"reason": reason, "message": message}}
    return {"phase": "Pending", key: [{"name": "trainer", "state": state}]}


def test_pending_reasons_name_what_blocks_the_pod():
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Pending", "conditions": [UNSCHEDULABLE]}}
    assert pending_reason(pod) == ("Unschedulable", UNSCHEDULABLE["message"])
    pod["status"] = waiting("ImagePullBackOff", 'Back-off pulling image "x"')
    reason, message = pending_reason(pod)
    assert reason == "ImagePullBackOff" and 'pulling image "x"' in message
    pod["status"] = waiting("CreateContainerConfigError", "configmap k not found", init=True)
    assert pending_reason(pod)[0] == "CreateContainerConfigError"
    pod["status"] = waiting("ContainerCreating")
    assert pending_reason(pod)[0] == "Pending"  # normal start-up, nothing to report


def test_a_pod_terminating_on_an_unreachable_node_says_what_to_do():
    pod = {
        "metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }
    node = {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    c = classify(pod, node=node, node_known=True)
    assert c.outcome == Outcome.TERMINATING and c.reason == "TerminatingOnUnreachableNode"
    assert "node.kubernetes.io/out-of-service" in c.message
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert classify(pod, node=ready, node_known=True).reason == "DeletedExternally"


@pytest.mark.parametrize("policy", ["Ignore", "Restart", "Fail"])
def test_a_long_running_group_being_evicted_is_not_stalled_until_its_end_lasts(policy: str):
    """The group trained for 800 s (past pendingTimeoutSeconds 600 since its start);
    a drain evicts its pod with a grace period. That wait is judged from the eviction,
    not the group's start: no Stalled, and stallPolicy Fail does not end the job."""
    w = World(stallPolicy=policy)
    start(w)
    for _ in range(8):
        w.progress(trial_id="0001", step=3)
        w.step(seconds=100)
    pod = w.pods["j-worker-0"]
    pod["metadata"]["deletionTimestamp"] = st.rfc3339(w.now + dt.timedelta(seconds=30))
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    evicted = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    pod["status"]["conditions"] = [evicted]
    w.step()
    assert w.status["phase"] != st.PHASE_FAILED and w.status.get("stallRestarts", 0) == 0
    assert w.condition(st.COND_STALLED)["status"] == "False"
    assert "being deleted" in w.status["message"]
    w.step(seconds=600)  # within its grace period and the timeout after it
    assert w.condition(st.COND_STALLED)["status"] == "False"
    w.step(seconds=32)  # a pod that never goes is stalled, from when it was due on
    if policy == "Fail":
        assert w.status["phase"] == st.PHASE_FAILED and "Terminating for 60" in w.status["message"]
    else:
        assert w.condition(st.COND_STALLED)["status"] == "True"


def test_a_pod_with_a_long_grace_period_is_not_stalled_while_it_may_still_checkpoint():
    w = World(stallPolicy="Fail")
    start(w)
    w.step(seconds=700)
    pod = w.pods["j-worker-0"]
    pod["metadata"]["deletionTimestamp"] = st.rfc3339(w.now + dt.timedelta(seconds=900))
    pod["metadata"]["deletionGracePeriodSeconds"] = 900
    w.step(seconds=890)
    assert w.status["phase"] != st.PHASE_FAILED
    assert w.condition(st.COND_STALLED)["status"] == "False"


def test_an_unschedulable_group_is_named_then_stalled():
    w = World(pendingTimeoutSeconds=60)
    w.step()
    unschedulable(w)
    w.step()
    running = w.condition(st.COND_RUNNING)
    assert (
        running["reason"] == "Unschedulable" and "Insufficient nvidia.com/gpu" in running["message"]
    )
    assert w.condition(st.COND_STALLED)["status"] == "False"
    w.step(61)
    stalled = w.condition(st.COND_STALLED)
    assert stalled["status"] == "True" and stalled["reason"] == "Unschedulable"
    assert "pendingTimeoutSeconds=60" in stalled["message"]
    assert w.reasons().count("Stalled") == 1
    w.step()
    assert w.reasons().count("Stalled") == 1  # once per stall
    w.run_pods()
    w.step()
    assert w.condition(st.COND_STALLED)["status"] == "False"


@pytest.mark.parametrize("policy", ["Restart", "Fail"])
def test_the_stall_policy(policy: str):
    w = World(pendingTimeoutSeconds=60, stallPolicy=policy)
    w.step()
    for pod in w.pods.values():
        pod["status"] = waiting("ImagePullBackOff", "no such image")
    w.step(61)
    if policy == "Fail":
        assert w.status["phase"] == st.PHASE_FAILED
        assert w.condition(st.COND_FAILED)["reason"] == "Stalled"
        return
    assert w.status["restarts"] == 1 and w.status["stallRestarts"] == 1
    assert w.status["failures"] == 0 and w.status["preemptions"] == 0
    assert w.status["attempt"] == 1 and w.reasons()[-1] == "StallRestart"
    w.gc_deleted()
    d: Decision = w.step()
    assert d.create_pods == [0] and d.create_attempt == 1
    assert w.condition(st.COND_STALLED)["status"] == "False"


def test_a_running_trainer_without_progress_is_restarted_by_the_policy():
    w = World(stallTimeoutSeconds=60, stallPolicy="Restart")
    start(w)
    w.progress(trial_id="0001", step=3)
    w.step(61)
    assert w.condition(st.COND_STALLED)["reason"] == "NoProgress"
    assert w.status["stallRestarts"] == 1 and w.status["failures"] == 0


def test_the_phase_is_pending_while_the_group_is_replaced():
    w = World()
    start(w)
    w.vanish("j-worker-0")
    w.step()
    assert w.status["phase"] == st.PHASE_PENDING and w.status["preemptions"] == 1
    w.step()
    unschedulable(w)
    w.step()
    assert w.status["phase"] == st.PHASE_PENDING
    w.run_pods()
    w.step()
    assert w.status["phase"] == st.PHASE_RUNNING


def test_backoff_is_a_condition():
    w = World()
    start(w)
    w.terminate("j-worker-0", 1, "boom")
    w.step()
    w.gc_deleted()
    w.step()
    running = w.condition(st.COND_RUNNING)
    assert running["reason"] == "Backoff" and "retrying at" in running["message"]


def test_a_pod_refused_by_quota_is_reported_and_nothing_else_applied():
    fake = FakeKube(refuse_pods=QUOTA_REFUSAL)
    decision = Decision(status={"attemptStarted": True}, create_pods=[0], create_attempt=0)
    with pytest.raises(executor.PodRejected, match="exceeded quota: gpus"):
        executor.apply(fake, JOB, rendered(decision, JOB, job_spec(JOB)))
    assert not [c for c in fake.calls if c[0] == "patch_status"]


def test_a_group_refused_by_a_quota_past_the_pending_timeout_fails_the_job_by_policy():
    """The refusal is decided like any stuck reason: condition Running says it, Stalled
    follows at pendingTimeoutSeconds since the first refusal, and stallPolicy Fail ends
    the job with the refusal in its Failed condition."""
    w = World(pendingTimeoutSeconds=60, stallPolicy="Fail")
    w.kube.refuse_pods = QUOTA_REFUSAL
    d = w.step()
    assert not d.create_pods and w.pods == {}
    running = w.condition(st.COND_RUNNING)
    assert running["status"] == "False" and running["reason"] == POD_REJECTED
    assert "exceeded quota: gpus" in running["message"]
    assert w.status["phase"] == st.PHASE_PENDING and not w.status.get("attemptStarted")
    assert w.reasons() == [POD_REJECTED]
    w.step(30)
    assert w.status["phase"] == st.PHASE_PENDING and w.reasons() == [POD_REJECTED]
    w.step(31)  # 61 s after the first refusal
    assert w.status["phase"] == st.PHASE_FAILED
    failed = w.condition(st.COND_FAILED)
    assert failed["reason"] == "Stalled"
    assert "PodRejected for 61s (pendingTimeoutSeconds=60)" in failed["message"]
    assert "exceeded quota: gpus" in failed["message"]
    assert w.reasons() == [POD_REJECTED, "Stalled", "Stalled"]  # the stall, then the failure
    assert w.status["failures"] == 0 and w.status["restarts"] == 0 and w.pods == {}
    assert w.step(5).finished and w.pods == {}  # not tried again once failed


@pytest.mark.parametrize("policy", ["Ignore", "Restart"])
def test_a_refused_group_stalls_once_and_starts_when_the_quota_allows(policy: str):
    w = World(pendingTimeoutSeconds=60, stallPolicy=policy)
    w.kube.refuse_pods = QUOTA_REFUSAL
    w.step()
    w.step(61)
    stalled = w.condition(st.COND_STALLED)
    assert stalled["status"] == "True" and stalled["reason"] == POD_REJECTED
    assert w.status["phase"] == st.PHASE_PENDING
    w.step()
    assert w.reasons() == [POD_REJECTED, "Stalled"]  # once each, not once per pass
    # nothing to recreate under Restart: the group was never created
    assert w.status["restarts"] == 0 and w.status.get("stallRestarts", 0) == 0
    w.kube.refuse_pods = None  # the quota is raised
    d = w.step()
    assert d.create_pods == [0] and d.create_attempt == 0 and list(w.pods) == ["j-worker-0"]
    assert w.status["attemptStarted"] is True and "podsRefused" not in w.status
    assert w.condition(st.COND_STALLED)["status"] == "False"
    w.run_pods()
    w.step()
    assert w.status["phase"] == st.PHASE_RUNNING
    assert w.condition(st.COND_RUNNING)["reason"] == "TrainerRunning"


def test_a_child_name_taken_by_another_object_is_a_refusal_too():
    w = World(pendingTimeoutSeconds=60, stallPolicy="Fail")
    w.kube.objects[("ServiceAccount", "j-trainer")] = stored_object(
        "ServiceAccount", "j-trainer", None
    )
    w.step()
    assert w.condition(st.COND_RUNNING)["reason"] == CHILD_CONFLICT and w.pods == {}
    assert "ServiceAccount j-trainer exists" in w.status["message"]
    w.step(61)
    assert w.status["phase"] == st.PHASE_FAILED
    assert "ChildConflict for 61s" in w.condition(st.COND_FAILED)["message"]


def test_a_pod_that_exists_is_not_refused_by_a_full_quota():
    """Quota admission runs before the name is looked up: creating again a pod an
    earlier pass created is refused by a full quota, and means "it exists"."""
    w = World()
    w.step()
    (pod,) = w.pods.values()
    fake = FakeKube({("Pod", "j-worker-0"): pod}, job=w.job, pod_quota=1)
    executor.create_pod(fake, w.job, pod)  # no PodRejected
    other = {**pod, "metadata": {**pod["metadata"], "name": "j-worker-1"}}
    with pytest.raises(executor.PodRejected, match="exceeded quota: pods") as refused:
        executor.create_pod(fake, w.job, other)
    assert refused.value.pod == "j-worker-1"


def test_a_group_the_quota_lets_be_created_only_in_part_is_held_back_whole():
    """Two workers, room for one pod: the group is never recorded as started, the
    worker created alone is deleted (it would hold the quota the other needs, with no
    peer), nothing is counted, and the group starts once the quota allows both."""
    w = World(workers=2, pendingTimeoutSeconds=600)
    w.kube.pod_quota = 1
    for _ in range(3):
        w.step()
        assert not w.status.get("attemptStarted")
        assert w.condition(st.COND_RUNNING)["reason"] == POD_REJECTED
        w.gc_deleted()
    assert "j-worker-1 was refused" in w.status["message"]
    assert w.status["podsRefused"]["reason"] == POD_REJECTED
    assert ("delete", "Pod/j-worker-0") in w.kube.calls  # the lone worker went
    assert w.status["preemptions"] == 0 and w.status["failures"] == 0
    assert w.reasons() == [POD_REJECTED]
    w.kube.pod_quota = 2
    w.step()
    assert w.status["attemptStarted"] is True and sorted(w.pods) == ["j-worker-0", "j-worker-1"]
    assert "podsRefused" not in w.status


def test_suspending_a_refused_job_forgets_the_refusal():
    w = World(pendingTimeoutSeconds=60)
    w.kube.refuse_pods = QUOTA_REFUSAL
    w.step()
    assert "podsRefused" in w.status
    w.job["spec"]["suspend"] = True
    w.step(3600)
    assert w.status["phase"] == st.PHASE_SUSPENDED and "podsRefused" not in w.status
    w.job["spec"]["suspend"] = False
    w.step()  # refused again: waits from now, not from an hour ago
    assert w.condition(st.COND_STALLED)["status"] == "False"
    assert w.status["podsRefused"]["since"] == st.rfc3339(w.now)
