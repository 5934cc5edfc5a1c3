"""The disruption classifier: disruption is not failure."""

from __future__ import annotations

import pytest
import tuneop_contract as contract
from tuneop.decide.classify import Outcome, classify, classify_missing


def pod(phase="Running", *, exit_code=None, reason=None, message="", disruption=None,
        deleting=False, status_reason=None, node="gpu-node-0"):  # fmt: skip
    status: dict = {"phase": phase, "conditions": []}
    if disruption:
        status["conditions"].append(
            {"type": "DisruptionTarget", "status": "True", "reason": disruption}
        )
    if status_reason:
        status["reason"] = status_reason
    if exit_code is not None:
        terminated = {"exitCode": exit_code, "reason": reason or "Error", "message": message}
        status["containerStatuses"] = [{"name": "trainer", "state": {"terminated": terminated}}]
    meta: dict = {"name": "j-worker-0", "labels": {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


@pytest.mark.parametrize(
    "reason",
    ["PreemptionByScheduler", "EvictionByEvictionAPI", "DeletionByTaintManager",
     "TerminationByKubelet"],
)  # fmt: skip
def test_disruption_target_reasons_are_preemptions_even_with_an_error_exit(reason):
    result = classify(pod("Failed", exit_code=137, disruption=reason))
    assert result.outcome == Outcome.PREEMPTED and result.reason == reason


def test_trainer_preempted_exit_code_is_a_preemption():
    result = classify(pod("Failed", exit_code=contract.EXIT_PREEMPTED))
    assert result.outcome == Outcome.PREEMPTED and result.reason == "TrainerPreempted"


def test_exit_75_for_a_volume_that_refused_a_write_says_so():
    message = f"{contract.VOLUME_ERROR_PREFIX} No space left on device (ENOSPC) writing /x"
    result = classify(pod("Failed", exit_code=contract.EXIT_PREEMPTED, message=message))
    assert result.outcome == Outcome.PREEMPTED and result.reason == "CheckpointVolumeError"
    assert result.message == message


def test_deleted_by_someone_else_while_terminating_then_ended():
    assert classify(pod("Running", deleting=True)).outcome == Outcome.TERMINATING
    ended = classify(pod("Failed", exit_code=143, deleting=True))
    assert ended.outcome == Outcome.PREEMPTED and ended.reason == "DeletedExternally"


def test_kubelet_eviction_and_node_loss():
    evicted = classify(pod("Failed", status_reason="Evicted"))
    assert evicted.outcome == Outcome.PREEMPTED and evicted.reason == "TerminationByKubelet"
    gone = classify(pod("Running"), node=None, node_known=True)
    assert gone.outcome == Outcome.PREEMPTED and gone.reason == "NodeLost"
    unknown_node = classify(pod("Running"), node=None, node_known=False)
    assert unknown_node.outcome == Outcome.RUNNING


def test_real_failures_keep_the_trainer_message():
    failed = classify(pod("Failed", exit_code=1, message="ImportError: no module named x"))
    assert failed.outcome == Outcome.FAILED
    assert failed.message == "ImportError: no module named x" and failed.exit_code == 1
    oom = classify(pod("Failed", exit_code=137, reason="OOMKilled"))
    assert oom.outcome == Outcome.FAILED and oom.reason == "OOMKilled"
    assert "out of memory" in oom.message
    invalid = classify(pod("Failed", exit_code=contract.EXIT_INVALID_SPEC, message="spec.x: bad"))
    assert invalid.outcome == Outcome.INVALID_SPEC and invalid.message == "spec.x: bad"


def test_completed_pending_running():
    assert classify(pod("Succeeded", exit_code=0)).outcome == Outcome.COMPLETED
    assert classify(pod("Pending")).outcome == Outcome.PENDING
    assert classify(pod("Running")).outcome == Outcome.RUNNING


def test_vanished_pods_use_the_last_seen_version():
    assert classify_missing(None).reason == "DeletedExternally"
    evicted = classify_missing(pod("Running", disruption="EvictionByEvictionAPI"))
    assert evicted.outcome == Outcome.PREEMPTED and evicted.reason == "EvictionByEvictionAPI"
    assert classify_missing(pod("Succeeded", exit_code=0)).outcome == Outcome.COMPLETED
    assert classify_missing(pod("Failed", exit_code=1)).outcome == Outcome.FAILED
    assert classify_missing(pod("Running")).outcome == Outcome.PREEMPTED


def test_the_exit_code_is_read_before_the_deletion():
    oom = classify(pod("Failed", exit_code=137, reason="OOMKilled", deleting=True))
    assert oom.outcome == Outcome.FAILED and "out of memory" in oom.message
    crashed = classify(pod("Failed", exit_code=1, message="boom", deleting=True))
    assert (crashed.outcome, crashed.message) == (Outcome.FAILED, "boom")
    invalid = classify(pod("Failed", exit_code=contract.EXIT_INVALID_SPEC, deleting=True))
    assert invalid.outcome == Outcome.INVALID_SPEC
    for killed in (137, 143, None):  # the deletion's own signal, or never started
        seen = classify(pod("Failed", exit_code=killed, deleting=True))
        assert (seen.outcome, seen.reason) == (Outcome.PREEMPTED, "DeletedExternally")


@pytest.mark.parametrize(
    "reason", ["UnexpectedAdmissionError", "OutOfnvidia.com/gpu", "OutOfcpu", "NodeAffinity"]
)
def test_kubelet_admission_rejections_are_disruptions_not_failures(reason):
    seen = classify(pod("Failed", status_reason=reason))
    assert (seen.outcome, seen.reason) == (Outcome.PREEMPTED, "AdmissionRejected")
    assert reason in seen.message


def test_an_oom_kill_says_how_to_raise_the_limit():
    seen = classify(pod("Failed", exit_code=137, reason="OOMKilled"))
    assert seen.outcome == Outcome.FAILED and seen.reason == "OOMKilled"
    assert "spec.resources.limits.memory" in seen.message


def test_out_of_memory_is_marked_for_the_decision():
    oom = classify(pod("Failed", exit_code=137, reason="OOMKilled"))
    assert oom.outcome == Outcome.FAILED and oom.out_of_memory
    # reason Error, exit 137, nobody deleted or disrupted the pod: the OOM killer
    killed = classify(pod("Failed", exit_code=137))
    assert killed.outcome == Outcome.FAILED and killed.out_of_memory
    assert "out of memory" in killed.message and killed.exit_code == 137
    # the same exit on a pod being deleted or disrupted is the deletion/disruption
    assert not classify(pod("Failed", exit_code=137, deleting=True)).out_of_memory
    disrupted = classify(pod("Failed", exit_code=137, disruption="PreemptionByScheduler"))
    assert disrupted.outcome == Outcome.PREEMPTED and not disrupted.out_of_memory
    # other exits are plain failures
    for code in (1, 139, 143):
        seen = classify(pod("Failed", exit_code=code))
        assert seen.outcome == Outcome.FAILED and not seen.out_of_memory
    vanished = classify_missing(pod("Failed", exit_code=137, reason="OOMKilled"))
    assert vanished.outcome == Outcome.FAILED and vanished.out_of_memory
