"""The reconcile decision driven through whole scenarios (tests/unit/operator_world.py:
each Decision applied to in-memory dicts), so the pure decision logic is exercised step
by step."""

from __future__ import annotations

from typing import Any

import tuneop_contract as contract
from tuneop.api import names
from tuneop.api import status as st
from tuneop.decide.reconcile import decide, nodes_to_read
from tuneop.render import children, trainer_pods
from tuneop_contract.spec import JobSpec

from tests.unit.crd_schema import check, schema
from tests.unit.operator_world import T0, World, observed, start


def test_happy_path_runs_to_completion_with_best_trial():
    w = World()
    start(w)
    assert list(w.pods) == ["j-worker-0"]
    assert w.status["attempt"] == 0 and w.status["startTime"]
    w.progress(phase=contract.PHASE_RUNNING, trial_id="0001", trials_total=4, trials_completed=1,
               best_trial_id="0000", best_score=0.5, best_hyperparameters={"units": 8})  # fmt: skip
    w.step()
    assert w.status["trials"] == "1/4"
    assert w.status["currentTrial"] == "0001"
    assert w.status["bestTrial"] == {"id": "0000", "score": 0.5, "hyperparameters": {"units": 8}}
    assert w.condition(st.COND_RUNNING)["status"] == "True"
    assert w.condition(st.COND_RUNNING)["observedGeneration"] == 1
    w.terminate("j-worker-0", 0)
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED
    assert w.condition(st.COND_COMPLETE)["status"] == "True"
    assert w.status["completionTime"]
    assert w.reasons() == ["Created", "Completed"]
    assert "best trial 0000 score 0.5" in w.events[-1][2]
    # terminal: nothing more happens, the completed pod is kept
    d = w.step()
    assert d.delete_pods == [] and not d.create_pods and not d.events


def test_preemption_recreates_counts_and_reports_the_restore():
    w = World()
    start(w)
    w.progress(trial_id="0002", step=7)
    pod = w.pods["j-worker-0"]
    pod["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    w.vanish("j-worker-0")  # the scheduler deleted it; the watch saw the condition
    w.step()
    assert w.status["preemptions"] == 1 and w.status["failures"] == 0
    assert w.status["attempt"] == 1 and w.status["restarts"] == 1
    assert w.reasons()[-1] == "Preempted" and "PreemptionByScheduler" in w.events[-1][2]
    d = w.step()
    assert d.create_pods == [0] and d.create_attempt == 1
    assert w.pods["j-worker-0"]["metadata"]["labels"][names.LABEL_ATTEMPT] == "1"
    w.run_pods()
    w.step()
    assert w.status["restores"] == 0  # no resumed step reported yet
    w.progress(trial_id="0002", step=8, resumed_from_step=7, restores=1)
    w.step()
    assert w.status["restores"] == 1 and w.reasons()[-1] == "Restored"
    assert "step 7" in w.events[-1][2]
    w.step()
    assert w.status["restores"] == 1  # reported once per pod group


def test_a_restore_at_an_epoch_boundary_is_reported_from_the_restores_count():
    w = World()
    start(w)
    w.progress(trial_id="0001", step=12, restores=2)  # earlier restores of this search
    w.vanish("j-worker-0")
    w.step()
    w.step()
    w.run_pods()
    w.step()
    w.progress(trial_id="0001", step=0, resumed_from_step=0)  # the new trainer, not restored yet
    w.step()
    assert w.status["restores"] == 0
    w.progress(trial_id="0001", step=0, resumed_from_step=0, restores=3)
    w.step()
    assert w.status["restores"] == 1 and "epoch boundary" in w.events[-1][2]


def test_pod_deleted_by_a_person_waits_for_the_checkpoint_then_recreates():
    w = World()
    start(w)
    w.pods["j-worker-0"]["metadata"]["deletionTimestamp"] = "x"  # kubectl delete pod
    d = w.step()
    assert d.delete_pods == [] and not d.create_pods
    assert "waiting" in w.status["message"]
    w.terminate("j-worker-0", contract.EXIT_PREEMPTED)
    w.step()
    assert w.status["preemptions"] == 1 and w.status["attempt"] == 1
    d = w.step()
    assert not d.create_pods  # the old pod still exists: same name, wait
    w.gc_deleted()
    d = w.step()
    assert d.create_pods == [0]


def test_failures_back_off_exponentially_then_exhaust_the_budget():
    w = World()
    start(w)
    w.terminate("j-worker-0", 1, "ValueError: bad layer")
    w.step()
    assert w.status["failures"] == 1 and w.status["attempt"] == 1
    assert w.reasons()[-1] == "TrainerFailed" and "ValueError: bad layer" in w.events[-1][2]
    w.gc_deleted()
    assert w.step(5).create_pods == []  # backoff 10 s
    assert "retrying at" in w.status["message"]
    assert w.step(6).create_pods == [0]
    w.run_pods()
    w.step()
    w.terminate("j-worker-0", 1, "ValueError: bad layer")
    w.step()
    assert w.status["failures"] == 2
    w.gc_deleted()
    assert w.step(14).create_pods == []  # backoff 20 s capped at 15 s
    assert w.step(2).create_pods == [0]
    w.run_pods()
    w.terminate("j-worker-0", 1, "ValueError: bad layer")
    w.step()
    assert w.status["phase"] == st.PHASE_FAILED
    failed = w.condition(st.COND_FAILED)
    assert failed["reason"] == "FailureBudgetExceeded"
    assert "ValueError: bad layer" in failed["message"] and "maxFailures=2" in failed["message"]
    assert w.status["preemptions"] == 0


def test_preemption_budget_is_separate_and_exhausts():
    w = World()
    for _ in range(3):
        start(w)
        w.vanish("j-worker-0")
        w.step()
    assert w.status["phase"] == st.PHASE_FAILED
    assert w.condition(st.COND_FAILED)["reason"] == "PreemptionBudgetExceeded"
    assert w.status["preemptions"] == 3 and w.status["failures"] == 0


VOLUME_FULL = (
    f"{contract.VOLUME_ERROR_PREFIX} No space left on device (ENOSPC) writing "
    "/var/lib/tuneop/checkpoints/progress.json (0.0 MiB free of 1024.0 MiB); nothing was lost"
)


def test_a_full_checkpoint_volume_backs_off_and_says_so_not_a_tight_loop_of_preemptions():
    """A trainer stopped by its volume refusing writes (exit 75, the contract's message):
    a preemption, but the group is recreated only after the backoff, doubling, and the
    Event and status name the volume's message and the claim; the budget still ends it."""
    policy = {"maxFailures": 2, "backoffSeconds": 10, "maxBackoffSeconds": 300, "maxPreemptions": 2}
    w = World(failurePolicy=policy)
    start(w)
    w.terminate("j-worker-0", contract.EXIT_PREEMPTED, VOLUME_FULL)
    w.step()
    assert w.status["preemptions"] == 1 and w.status["failures"] == 0
    assert w.status["restarts"] == 1 and w.reasons()[-1] == "CheckpointVolumeError"
    assert "No space left on device" in w.events[-1][2] and "claim j-ckpt" in w.events[-1][2]
    assert w.events[-1][0] == "Warning"
    w.gc_deleted()
    assert w.step(5).create_pods == []  # backoff 10 s
    assert "retrying at" in w.status["message"]
    assert w.step(6).create_pods == [0]
    w.run_pods()
    w.step()
    w.terminate("j-worker-0", contract.EXIT_PREEMPTED, VOLUME_FULL)
    w.step()
    w.gc_deleted()
    assert w.step(15).create_pods == []  # backoff 20 s
    assert w.step(6).create_pods == [0]
    w.run_pods()
    w.terminate("j-worker-0", contract.EXIT_PREEMPTED, VOLUME_FULL)
    w.step()
    failed = w.condition(st.COND_FAILED)
    assert w.status["phase"] == st.PHASE_FAILED and failed["reason"] == "PreemptionBudgetExceeded"
    assert "No space left on device" in failed["message"]


def test_a_plain_exit_75_is_recreated_at_once():
    w = World()
    start(w)
    w.terminate("j-worker-0", contract.EXIT_PREEMPTED, "")
    w.step()
    assert w.reasons()[-1] == "Preempted" and "nextRetryTime" not in w.status
    w.gc_deleted()
    assert w.step(0.1).create_pods == [0]


def test_invalid_spec_from_the_trainer_fails_at_once_with_its_message():
    w = World()
    start(w)
    w.terminate("j-worker-0", contract.EXIT_INVALID_SPEC, "spec.data.path: /x not found")
    w.step()
    assert w.status["phase"] == st.PHASE_FAILED
    cond = w.condition(st.COND_FAILED)
    assert cond["reason"] == "InvalidSpec" and "spec.data.path: /x not found" in cond["message"]


def test_operator_side_invalid_spec_creates_nothing_and_names_the_field():
    w = World(env=[{"name": "TF_CONFIG", "value": "{}"}])
    d = w.step()
    assert not d.create_pods and not d.ensure_children
    assert w.status["phase"] == st.PHASE_FAILED
    cond = w.condition(st.COND_FAILED)
    assert cond["reason"] == "InvalidSpec" and "spec.env[0].name" in cond["message"]
    assert w.events[-1][:2] == ("Warning", "InvalidSpec")
    # fixing the spec (new generation) starts the job
    w.job["spec"]["env"] = []
    w.job["metadata"]["generation"] = 2
    d = w.step()
    assert d.create_pods == [0] and w.condition(st.COND_FAILED)["status"] == "False"


def test_a_multi_worker_group_is_restarted_together():
    w = World(workers=3)
    start(w)
    assert sorted(w.pods) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    w.vanish("j-worker-1")
    d = w.step()
    assert sorted(ref.name for ref in d.delete_pods) == ["j-worker-0", "j-worker-2"]
    assert w.status["preemptions"] == 1
    assert w.step().create_pods == []  # old workers still terminating
    w.gc_deleted()
    d = w.step()
    assert d.create_pods == [0, 1, 2] and d.create_attempt == 1


def test_a_worker_crashing_because_its_peer_was_preempted_is_no_failure():
    w = World(workers=2)
    start(w)
    w.vanish("j-worker-1")  # evicted
    w.terminate("j-worker-0", 1, "collective op failed: peer unreachable")
    w.step()
    assert w.status["preemptions"] == 1 and w.status["failures"] == 0
    assert w.reasons()[-1] == "Preempted"


def _fail_now(w: Any, name: str, message: str = "") -> None:
    """The worker's trainer exits 1 now (finishedAt set, as a kubelet reports it)."""
    w.terminate(name, 1, message)
    w.pods[name]["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = (
        st.rfc3339(w.now)
    )


def test_a_worker_failing_before_its_peers_node_is_seen_lost_waits_and_counts_a_preemption():
    """A node crash: the worker elsewhere fails at once (its collective broke), while the
    peer on the crashed node still reads Running until the node controller's grace
    period; then the taint manager evicts it. Disruption, not failure."""
    w = World(workers=2)
    start(w)
    _fail_now(w, "j-worker-0", "UnknownError: collective op aborted")
    d = w.step()
    assert (w.status["failures"], w.status["preemptions"]) == (0, 0)
    assert not d.delete_pods and "waiting up to" in w.status["message"]
    assert 0 < d.requeue_after <= 90
    lost = w.pods["j-worker-1"]
    lost["metadata"]["deletionTimestamp"] = st.rfc3339(w.now)
    lost["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
    ]
    w.step(seconds=60)
    assert (w.status["failures"], w.status["preemptions"]) == (0, 0)
    assert "is being lost" in w.status["message"]
    w.vanish("j-worker-1")
    w.step()
    assert (w.status["failures"], w.status["preemptions"]) == (0, 1)
    assert w.reasons()[-1] == "Preempted"


def test_a_worker_failing_beside_a_peer_that_keeps_running_counts_after_the_grace():
    w = World(workers=2)
    start(w)
    _fail_now(w, "j-worker-0", "ValueError: bad batch")
    w.step()
    assert w.status["failures"] == 0
    d = w.step(seconds=91)
    assert (w.status["failures"], w.status["preemptions"]) == (1, 0)
    assert sorted(ref.name for ref in d.delete_pods) == ["j-worker-0", "j-worker-1"]


def test_the_wait_for_a_running_peer_is_no_stall_and_ends_in_the_failure():
    """pendingTimeoutSeconds shorter than the peer wait: the wait is bounded by its own
    deadline, so stallPolicy Fail neither ends the job nor a Restart hides the failure."""
    w = World(workers=2, pendingTimeoutSeconds=30, stallPolicy="Fail")
    start(w)
    w.step(seconds=700)
    _fail_now(w, "j-worker-0", "ValueError: bad batch")
    w.vanish("j-worker-0")  # gone already: read from its last version seen
    for _ in range(4):
        w.step(seconds=20)
        assert w.status["phase"] != st.PHASE_FAILED and w.status["failures"] == 0
        assert w.condition(st.COND_STALLED)["status"] == "False"
    w.step(seconds=20)
    assert (w.status["failures"], w.status["preemptions"]) == (1, 0)
    assert w.status.get("stallRestarts", 0) == 0


def test_suspend_stops_pods_without_counting_and_resume_restarts():
    w = World()
    start(w)
    w.job["spec"]["suspend"] = True
    d = w.step()
    assert [ref.name for ref in d.delete_pods] == ["j-worker-0"]
    assert w.status["phase"] == st.PHASE_SUSPENDED
    assert w.condition(st.COND_SUSPENDED)["status"] == "True"
    w.terminate("j-worker-0", contract.EXIT_PREEMPTED)
    w.gc_deleted()
    w.step()
    assert w.status["message"] == "suspended"
    assert w.status["preemptions"] == 0 and w.status["failures"] == 0
    w.job["spec"]["suspend"] = False
    d = w.step()
    assert d.create_pods == [0] and d.create_attempt == 1
    assert w.condition(st.COND_SUSPENDED)["status"] == "False"
    assert w.reasons() == ["Created", "Suspended", "Resumed", "Created"]


def test_stall_is_detected_and_cleared():
    w = World(stallTimeoutSeconds=60)
    start(w)
    w.progress(trial_id="0000", step=1)
    w.step(30)
    assert w.condition(st.COND_STALLED)["status"] == "False"
    w.step(40)
    assert w.condition(st.COND_STALLED)["status"] == "True"
    assert w.reasons()[-1] == "Stalled"
    w.step()
    assert w.reasons().count("Stalled") == 1
    w.progress(step=2)
    w.step()
    assert w.condition(st.COND_STALLED)["status"] == "False"


def test_ttl_deletes_the_finished_job():
    w = World(ttlSecondsAfterFinished=30)
    start(w)
    w.terminate("j-worker-0", 0)
    d = w.step()
    assert d.requeue_after == 30 and not d.delete_job
    assert w.step(31).delete_job


def test_operator_restart_between_create_and_status_patch_creates_no_duplicates():
    w = World()
    d = decide(observed(w.job, [], now=T0))
    assert d.create_pods == [0]
    # pods were created, then the operator died before patching status:
    pod = trainer_pods.build_pod(w.job, JobSpec.from_dict(w.job["spec"]), 0, 0)
    w.pods[pod["metadata"]["name"]] = pod
    d = w.step()  # the restarted operator decides the same (create by name -> 409, fine)
    assert d.create_pods == [0] and d.create_attempt == 0
    assert len(w.pods) == 1 and w.status["attemptStarted"] is True
    w.run_pods()
    w.step()
    assert w.status["phase"] == st.PHASE_RUNNING and w.status["preemptions"] == 0


# --- script mode ----------------------------------------------------------------------
def script_world(workers: int = 1, **script: Any) -> World:
    """A script-mode job (no hypermodel); by default its script is ConfigMap `search`."""
    w = World(workers=workers, script=script or {"configMap": {"name": "search"}})
    del w.job["spec"]["hypermodel"]
    return w


def script_volume(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((v for v in pod["spec"]["volumes"] if v["name"] == names.SCRIPT_VOLUME), None)


def test_a_script_job_waits_for_its_configmap_then_runs_with_trials_from_progress():
    w = script_world()
    d = w.step()
    assert not d.create_pods and not d.ensure_children and w.pods == {}
    assert w.status["phase"] == st.PHASE_PENDING
    running = w.condition(st.COND_RUNNING)
    assert running["status"] == "False" and running["reason"] == "ScriptConfigMapMissing"
    assert w.events == [("Warning", "ScriptConfigMapMissing", w.status["message"])]
    assert "ConfigMap 'search' (spec.script.configMap.name)" in w.status["message"]
    assert "kubectl create configmap search -n ns --from-file=search.py" in w.status["message"]
    w.step()
    w.step()
    assert w.reasons() == ["ScriptConfigMapMissing"] and w.pods == {}  # one Event, no pods
    w.configmaps["search"] = {"data": {"emg_search.py": "import keras_tuner"}}
    start(w)
    assert script_volume(w.pods["j-worker-0"]) == {
        "name": names.SCRIPT_VOLUME,
        "configMap": {"name": "search"},
    }
    assert w.status["trials"] == "0/?"  # a script's trial count is known from the trainer
    w.progress(phase=contract.PHASE_RUNNING, trial_id="1", trials_completed=1, trials_total=3)
    w.step()
    assert w.status["trials"] == "1/3" and w.status["trialsTotal"] == 3
    w.progress(trials_completed=3, best_trial_id="2", best_score=0.9)
    w.terminate("j-worker-0", 0)
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED and w.status["trials"] == "3/3"
    assert w.reasons() == ["ScriptConfigMapMissing", "Created", "Completed"]


def test_a_configmap_without_the_script_is_an_invalid_spec_until_the_map_is_fixed():
    w = script_world(configMap={"name": "search", "key": "train.py"})
    w.configmaps["search"] = {"data": {"a.py": "", "b.py": ""}}
    d = w.step()
    assert not d.create_pods and not d.ensure_children
    assert w.status["phase"] == st.PHASE_FAILED
    failed = w.condition(st.COND_FAILED)
    assert failed["reason"] == "InvalidSpec"
    assert failed["message"] == (
        "invalid spec: spec.script.configMap.key: ConfigMap 'search' has no key 'train.py' "
        "(it has: a.py, b.py)"
    )
    assert w.events[-1][:2] == ("Warning", "InvalidSpec")
    w.step()
    assert w.reasons() == ["InvalidSpec"] and w.pods == {}
    # the user adds the key: no spec change (the script is immutable), the job reopens
    w.configmaps["search"]["data"]["train.py"] = "import keras_tuner"
    d = w.step()
    assert d.create_pods == [0] and w.condition(st.COND_FAILED)["status"] == "False"
    assert w.reasons() == ["InvalidSpec", "SpecChanged", "Created"]


def test_the_trainers_invalid_spec_does_not_reopen_without_a_spec_change():
    w = script_world()
    w.configmaps["search"] = {"data": {"search.py": "raise SystemExit(2)"}}
    start(w)
    w.terminate("j-worker-0", contract.EXIT_INVALID_SPEC, "spec.script: the script failed")
    w.step()
    assert w.status["phase"] == st.PHASE_FAILED
    for _ in range(3):
        d = w.step()
        assert not d.create_pods and w.status["phase"] == st.PHASE_FAILED


def test_a_preempted_script_group_waits_for_a_deleted_configmap_and_counts_once():
    w = script_world(workers=2)
    w.configmaps["search"] = {"data": {"search.py": ""}}
    start(w)
    assert all(script_volume(p) is not None for p in w.pods.values())
    del w.configmaps["search"]
    w.vanish("j-worker-1")
    w.step()
    assert w.status["preemptions"] == 1 and w.status["attempt"] == 1
    w.gc_deleted()
    for _ in range(3):
        d = w.step()
        assert not d.create_pods and w.pods == {}
    assert w.condition(st.COND_RUNNING)["reason"] == "ScriptConfigMapMissing"
    w.configmaps["search"] = {"data": {"search.py": ""}}
    d = w.step()
    assert d.create_pods == [0, 1] and d.create_attempt == 1
    w.run_pods()
    w.step()
    assert w.status["preemptions"] == 1 and w.status["failures"] == 0
    assert w.condition(st.COND_RUNNING)["status"] == "True"
    assert w.reasons() == ["Created", "Preempted", "ScriptConfigMapMissing", "Created"]


def test_pending_pods_whose_configmap_went_away_say_so():
    w = script_world()
    w.configmaps["search"] = {"data": {"search.py": ""}}
    w.step()  # pods created; the ConfigMap is deleted before the kubelet mounts it
    del w.configmaps["search"]
    w.pods["j-worker-0"]["status"] = {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "trainer", "state": {"waiting": {"reason": "ContainerCreating"}}}
        ],
    }
    w.step()
    assert "ConfigMap 'search' (spec.script.configMap.name) not found" in w.status["message"]
    assert w.pods["j-worker-0"]["metadata"].get("deletionTimestamp") is None


def test_a_script_path_job_needs_no_configmap():
    w = script_world(path="/checkpoints/code/search.py")
    start(w)
    assert script_volume(w.pods["j-worker-0"]) is None


def _summary(**fields: Any) -> str:
    return contract.FinalSummary(**fields).to_message()


def test_the_final_summary_wins_over_a_stale_progress():
    """Every trainer status patch after trial 1 was lost (API server down while the
    trainer finished): the termination message still carries the final result."""
    w = World()
    start(w)
    w.progress(trials_total=6, trials_completed=1, best_trial_id="0000", best_score=0.5,
               best_hyperparameters={"units": 8})  # fmt: skip
    w.step()
    summary = _summary(trials_completed=6, trials_total=6, best_trial_id="0004",
                       best_score=0.9, best_hyperparameters={"units": 32})  # fmt: skip
    w.terminate("j-worker-0", 0, summary)
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED
    assert w.status["trials"] == "6/6" and w.status["trialsCompleted"] == 6
    assert w.status["bestTrial"] == {"id": "0004", "score": 0.9, "hyperparameters": {"units": 32}}
    assert w.status["resultSource"] == "TerminationMessage"
    assert "best trial 0004 score 0.9" in w.status["message"]
    w.step()  # the stale progress does not take it back
    assert w.status["trials"] == "6/6" and w.status["bestTrial"]["id"] == "0004"


def test_a_summary_without_hyperparameters_keeps_those_of_the_same_best_trial():
    w = World()
    start(w)
    w.progress(trials_total=6, trials_completed=5, best_trial_id="0004", best_score=0.8,
               best_hyperparameters={"units": 32})  # fmt: skip
    w.step()
    w.terminate("j-worker-0", 0, _summary(trials_completed=6, trials_total=6,
                                          best_trial_id="0004", best_score=0.9))  # fmt: skip
    w.step()
    assert w.status["bestTrial"] == {"id": "0004", "score": 0.9, "hyperparameters": {"units": 32}}


def _top(*scored: tuple[str, float]) -> list[dict[str, Any]]:
    return [{"trialId": i, "score": v, "hyperparameters": {"units": int(i)}} for i, v in scored]


def test_the_top_trials_follow_the_progress_then_the_final_summary():
    w = World()
    start(w)
    w.progress(trials_total=6, trials_completed=2, top_trials=_top(("1", 0.8), ("0", 0.5)))
    w.step()
    assert w.status["topTrials"] == [
        {"id": "1", "score": 0.8, "hyperparameters": {"units": 1}},
        {"id": "0", "score": 0.5, "hyperparameters": {"units": 0}},
    ]
    w.progress(top_trials=_top(("1", 0.8), ("3", 0.6), ("0", 0.5)))
    w.step()
    assert [t["id"] for t in w.status["topTrials"]] == ["1", "3", "0"]
    w.report({**w.status["progress"], "topTrials": [{"trialId": "9"}]})  # a bad entry
    w.step()
    assert [t["id"] for t in w.status["topTrials"]] == ["1", "3", "0"]  # kept, not lost
    summary = _summary(trials_completed=6, trials_total=6, best_trial_id="5", best_score=0.9,
                       top_trials=_top(("5", 0.9), ("1", 0.8)))  # fmt: skip
    w.terminate("j-worker-0", 0, summary)
    w.step()
    assert [(t["id"], t["score"]) for t in w.status["topTrials"]] == [("5", 0.9), ("1", 0.8)]


def test_a_summary_without_top_trials_keeps_those_of_the_progress():
    w = World()
    start(w)
    w.progress(trials_total=2, trials_completed=2, top_trials=_top(("1", 0.7)))
    w.step()
    w.terminate("j-worker-0", 0, _summary(trials_completed=2, trials_total=2,
                                          best_trial_id="1", best_score=0.7))  # fmt: skip
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED
    assert w.status["topTrials"] == [{"id": "1", "score": 0.7, "hyperparameters": {"units": 1}}]


def test_without_a_summary_the_final_status_comes_from_the_progress():
    w = World()
    start(w)
    w.progress(trials_total=2, trials_completed=2, best_trial_id="0001", best_score=0.7)
    w.step()
    w.terminate("j-worker-0", 0, "")
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED and w.status["trials"] == "2/2"
    assert w.status["bestTrial"] == {"id": "0001", "score": 0.7}
    assert w.status["resultSource"] == "Progress"


def test_a_vanished_completed_pod_still_yields_its_summary():
    w = World()
    start(w)
    w.terminate("j-worker-0", 0, _summary(trials_completed=3, trials_total=3, best_trial_id="2"))
    w.vanish("j-worker-0")
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED and w.status["trials"] == "3/3"
    assert w.status["bestTrial"] == {"id": "2"}


def test_a_poisoned_progress_is_ignored_field_by_field_and_the_job_still_reconciles():
    w = World()
    start(w)
    w.report({
        "trialsCompleted": "many",
        "trialsTotal": -3,
        "trialId": {"x": 1},
        "bestTrialId": "0002",
        "bestScore": "NaN",
        "bestHyperparameters": [1, 2],
        "lastProgressTime": "yesterday",
        "resumedFromStep": 1e400,
        "restores": True,
        "phase": "Succeeded",
    })  # fmt: skip
    w.status["restoreBaseline"] = "x"
    d = w.step()
    assert w.status["trials"] == "0/?" and w.status["bestTrial"] == {"id": "0002"}
    assert "configmaps/j-progress.trialsCompleted" in d.ignored
    assert "configmaps/j-progress.phase" in d.ignored
    assert "configmaps/j-progress.bestTrialId" not in d.ignored
    assert "lastProgressTime" not in w.status
    assert w.status["progress"] == {"bestTrialId": "0002"}  # only what is valid is copied
    assert w.status["phase"] == st.PHASE_RUNNING
    w.reported = {"data": {contract.PROGRESS_KEY: "{not json"}}
    assert w.step().ignored == ("configmaps/j-progress:progress.json",)
    w.report("not an object")
    assert w.step().ignored == ("configmaps/j-progress",)
    poisoned = {**w.job, "status": {**w.status, "progress": "not an object"}}
    assert decide(observed(poisoned, list(w.pods.values()), now=w.now)).ignored == (
        "status.progress",
    )
    w.terminate("j-worker-0", 0)
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED


def test_garbage_in_the_operators_own_status_counters_reads_as_zero():
    w = World()
    start(w)
    w.status["preemptions"] = "lots"
    w.terminate("j-worker-0", contract.EXIT_PREEMPTED)
    w.step()
    assert w.status["preemptions"] == 1 and w.status["attempt"] == 1


def test_a_recreated_job_waits_for_the_old_jobs_pods_without_adopting_or_deleting_them():
    old = World()
    old.job["metadata"]["uid"] = "old-uid"
    start(old)
    old.terminate("j-worker-0", 1)  # the old job's pod, failed, still terminating
    w = World()  # same name, new uid
    w.pods = old.pods
    d = w.step()
    assert not d.create_pods and d.delete_pods == [] and w.status["failures"] == 0
    assert "earlier TuningJob" in w.status["message"]
    w.pods = {}
    assert w.step().create_pods == [0]


def test_deletions_name_the_pod_decided_about_by_uid():
    w = World()
    start(w)
    w.pods["j-worker-0"]["metadata"]["uid"] = "pod-uid-1"
    w.terminate("j-worker-0", contract.EXIT_PREEMPTED)
    d = w.step()
    assert [tuple(ref) for ref in d.delete_pods] == [("j-worker-0", "pod-uid-1")]


def test_a_workers_oom_is_not_masked_by_its_peers_exit_75():
    w = World(workers=3)
    start(w)
    w.terminate("j-worker-0", contract.EXIT_PREEMPTED)
    w.terminate("j-worker-1", 137)
    w.pods["j-worker-1"]["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = (
        "OOMKilled"
    )
    w.terminate("j-worker-2", contract.EXIT_PREEMPTED)
    w.step()
    assert (w.status["failures"], w.status["preemptions"]) == (1, 0)
    assert "out of memory" in w.status["message"] and "TrainerFailed" in w.reasons()


def test_an_external_disruption_still_wins_over_a_peers_crash():
    w = World(workers=2)
    start(w)
    evicted = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    w.terminate("j-worker-0", 1, conditions=[evicted])
    w.terminate("j-worker-1", 1)
    w.step()
    assert (w.status["failures"], w.status["preemptions"]) == (0, 1)


def test_the_trainers_record_is_copied_into_status_progress_and_nothing_else():
    w = World()
    start(w)
    w.progress(phase=contract.PHASE_RUNNING, trial_id="0001", trials_total=4, step=3)
    w.step()
    record = contract.progress_from_configmap(w.reported)
    assert w.status["progress"] == {k: v for k, v in record.items() if v is not None}
    # a forged record misleads at most the progress: not the phase, counters or budgets
    w.report({**record, "trialsCompleted": 4, "phase": contract.PHASE_COMPLETED,
              "preemptions": 99, "failures": 99, "attempt": 7, "fromANewerTrainer": 1})  # fmt: skip
    w.step()
    assert w.status["trials"] == "4/4" and w.status["phase"] == st.PHASE_RUNNING
    assert (w.status["preemptions"], w.status["failures"], w.status["attempt"]) == (0, 0, 0)
    assert "fromANewerTrainer" not in w.status["progress"]
    assert w.status["progress"]["phase"] == contract.PHASE_COMPLETED  # the record's own field
    w.report({"trialsCompleted": 1})  # fields it no longer reports leave status.progress
    w.step()
    assert w.status["progress"] == {"trialsCompleted": 1}


def test_the_last_groups_record_is_not_taken_for_the_new_groups_restore():
    w = World()
    start(w)
    w.progress(trial_id="0001", step=9, resumed_from_step=5, restores=1)  # group 0 resumed
    w.vanish("j-worker-0")
    w.step()
    d = w.step()
    assert d.create_pods == [0] and w.reported == children.build_progress_configmap(w.job)
    w.run_pods()
    for _ in range(3):
        w.step()
    assert "Restored" not in w.reasons() and w.status["restores"] == 0
    w.progress(trial_id="0001", step=10, resumed_from_step=9, restores=2)
    w.step()
    assert w.reasons()[-1] == "Restored" and w.status["restores"] == 1


def test_whatever_the_trainer_reports_the_copy_passes_the_crds_schema():
    progress_schema = schema()["properties"]["status"]["properties"]["progress"]
    hostile: list[Any] = [
        contract.Progress().to_status(),
        {"phase": "Succeeded", "direction": "up", "version": 0, "epoch": -1, "step": 10**13},
        {"trialId": "x" * 257, "message": "m" * 40000, "objective": 5, "bestScore": float("inf")},
        {"bestHyperparameters": {"blob": "x" * 20000}, "lastProgressTime": "2026-13-01T00:00:00Z"},
        {"trialsCompleted": 2.0, "trialsTotal": True, "restores": "3", "message": ""},
        {"topTrials": [{"trialId": "1", "score": float("nan")}]},
        {"topTrials": [{"trialId": str(i), "score": 1.0} for i in range(contract.TOP_TRIALS + 1)]},
        {"topTrials": [{"trialId": "1", "score": 1.0, "hyperparameters": {"b": "x" * 20000}}]},
    ]
    for record in hostile:
        w = World()
        start(w)
        w.report(record)
        w.step()
        copied = w.status.get("progress") or {}
        assert check(copied, progress_schema, ".status.progress") == [], record


def test_a_finished_job_says_so_unless_its_own_check_must_be_repeated():
    w = World()
    start(w)
    assert not w.step().finished
    w.terminate("j-worker-0", 0)
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED and w.step().finished
    failed = World(failurePolicy={"maxFailures": 0})
    start(failed)
    failed.terminate("j-worker-0", 1)
    failed.step()
    assert failed.status["phase"] == st.PHASE_FAILED and failed.step().finished
    # an InvalidSpec the operator found (a ConfigMap without the script) is re-checked
    # every pass: a fixed ConfigMap changes no generation
    script = World(script={"configMap": {"name": "s", "key": "search.py"}})
    script.job["spec"].pop("hypermodel")
    script.configmaps["s"] = {"data": {"other.py": ""}}
    script.step()
    assert script.status["phase"] == st.PHASE_FAILED and not script.step().finished


def test_nodes_are_read_only_for_running_pods_of_the_current_group():
    w = World(workers=2)
    assert nodes_to_read(w.job, []) == []
    start(w)
    for i, pod in enumerate(w.pods.values()):
        pod["spec"]["nodeName"] = f"n{i}"
    assert nodes_to_read(w.job, list(w.pods.values())) == ["n0", "n1"]
    w.terminate("j-worker-1", 0)  # ended: its own status says how
    assert nodes_to_read(w.job, list(w.pods.values())) == ["n0"]
    old = {**w.pods["j-worker-0"], "metadata": {**w.pods["j-worker-0"]["metadata"]}}
    old["metadata"]["labels"] = {**old["metadata"]["labels"], names.LABEL_ATTEMPT: "7"}
    assert nodes_to_read(w.job, [old]) == []  # another group's pod is never classified
    w.terminate("j-worker-0", 0)
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED
    w.pods["j-worker-0"]["status"] = {"phase": "Running"}
    assert nodes_to_read(w.job, list(w.pods.values())) == []


def _oom(w: World, name: str = "j-worker-0", reason: str = "OOMKilled") -> None:
    w.terminate(name, 137)
    w.pods[name]["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = reason


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v.get("value") for v in pod["spec"]["containers"][0]["env"]}


def test_an_oom_in_a_known_trial_records_it_and_goes_on_without_backoff():
    w = World(resources={"limits": {"memory": "2Gi"}})
    start(w)
    assert contract.ENV_FAILED_TRIALS not in _env(w.pods["j-worker-0"])
    w.progress(phase=contract.PHASE_RUNNING, trial_id="01", trials_completed=1, step=4)
    w.step()
    _oom(w)
    d = w.step()
    assert w.status["oomTrials"] == ["01"] and w.status["trialOOMs"] == 1
    assert (w.status["failures"], w.status["preemptions"]) == (0, 0)
    assert w.status["attempt"] == 1 and w.status["restarts"] == 1
    assert "nextRetryTime" not in w.status and d.requeue_after is None
    kind, reason, message = w.events[-1]
    assert (kind, reason) == ("Warning", "TrialOutOfMemory")
    assert "trial 01" in message and "spec.resources.limits.memory (limit 2Gi)" in message
    assert "search space" in message
    assert w.condition(st.COND_RUNNING)["reason"] == "TrialOutOfMemory"
    w.gc_deleted()
    d = w.step(0.1)  # at once: no backoff
    assert d.create_pods == [0] and d.create_attempt == 1
    env = _env(w.pods["j-worker-0"])
    assert env[contract.ENV_FAILED_TRIALS] == "01:OOMKilled"
    assert contract.parse_failed_trials(env[contract.ENV_FAILED_TRIALS]) == {"01": "OOMKilled"}
    # the next trial runs out of memory too: both are named to the next group
    w.run_pods()
    w.progress(trial_id="02", step=1)
    w.step()
    _oom(w)
    w.step()
    w.gc_deleted()
    w.step()
    assert w.status["oomTrials"] == ["01", "02"] and w.status["trialOOMs"] == 2
    assert _env(w.pods["j-worker-0"])[contract.ENV_FAILED_TRIALS] == "01:OOMKilled,02:OOMKilled"
    assert w.status["failures"] == 0
    w.run_pods()
    w.progress(trial_id="03", trials_completed=2)
    w.terminate("j-worker-0", 0)
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED


def test_an_unexplained_sigkill_in_a_known_trial_is_an_oom_too():
    w = World()
    start(w)
    w.progress(trial_id="00")
    w.step()
    w.terminate("j-worker-0", 137)  # reason Error: a process of the container OOM-killed
    w.step()
    assert w.status["trialOOMs"] == 1 and w.status["failures"] == 0
    assert "exit 137" in w.events[-1][2]


def test_an_oom_before_the_first_trial_is_a_failure():
    w = World()
    start(w)
    _oom(w)
    w.step()
    assert (w.status["failures"], w.status["trialOOMs"]) == (1, 0)
    assert "oomTrials" not in w.status and w.reasons()[-1] == "TrainerFailed"
    assert w.status.get("nextRetryTime")  # with backoff, as any failure


def test_an_oom_naming_a_trial_already_recorded_is_a_failure():
    """The next trainer ran out of memory before it reported a new trial (or did not
    honour the record): no loop on the same trial outside the failure budget."""
    w = World()
    start(w)
    w.progress(trial_id="01")
    w.step()
    _oom(w)
    w.step()
    w.gc_deleted()
    w.step()
    w.run_pods()
    w.step()
    _oom(w)  # status.progress still names trial 01
    w.step()
    assert (w.status["trialOOMs"], w.status["failures"]) == (1, 1)
    assert w.status["oomTrials"] == ["01"] and w.reasons()[-1] == "TrainerFailed"


def test_the_trial_oom_budget_is_separate_and_exhausts():
    w = World(failurePolicy={"maxFailures": 0, "maxTrialOOMs": 2})
    start(w)
    for i in range(3):
        w.progress(trial_id=f"0{i}")
        w.step()
        _oom(w)
        w.step()
        if i < 2:
            w.gc_deleted()
            w.step()
            w.run_pods()
            w.step()
    assert w.status["phase"] == st.PHASE_FAILED
    failed = w.condition(st.COND_FAILED)
    assert failed["reason"] == "TrialOOMBudgetExceeded"
    assert "maxTrialOOMs=2" in failed["message"] and "trial 02" in failed["message"]
    assert w.status["trialOOMs"] == 3 and w.status["failures"] == 0
    assert w.reasons().count("TrialOutOfMemory") == 2


def test_one_workers_oom_ends_the_trial_for_the_whole_group():
    w = World(workers=2)
    start(w)
    w.progress(trial_id="04")
    w.step()
    _oom(w, "j-worker-1")
    w.terminate("j-worker-0", 1, "collective op failed: peer gone")
    w.step()
    assert (w.status["trialOOMs"], w.status["failures"]) == (1, 0)
    assert "j-worker-1: OOMKilled" in w.events[-1][2]
    w.gc_deleted()
    w.step()
    for pod in w.pods.values():
        assert _env(pod)[contract.ENV_FAILED_TRIALS] == "04:OOMKilled"


def test_a_disruption_still_wins_over_an_oom():
    w = World(workers=2)
    start(w)
    w.progress(trial_id="04")
    w.step()
    evicted = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    w.terminate("j-worker-0", 137, conditions=[evicted])
    _oom(w, "j-worker-1")
    w.step()
    assert (w.status["preemptions"], w.status["trialOOMs"]) == (1, 0)


def test_a_forged_oom_list_in_status_reads_as_ids_only():
    w = World()
    start(w)
    w.status["oomTrials"] = ["01", {"x": 1}, True, 7]
    w.progress(trial_id="02")
    w.step()
    _oom(w)
    w.step()
    assert w.status["oomTrials"] == ["01", "7", "02"]
