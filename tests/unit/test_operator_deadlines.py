"""A job's next pass is due at the earliest deadline its rules wait for, not on a fixed
tick: each pass here runs exactly when the previous decision asked (Decision.
requeue_after), and the rule fires in that pass. Events (pods, progress, nodes) wake a
job sooner; run.runtime.next_pass caps the wait with the resync safety net."""

from __future__ import annotations

import pytest
from tuneop.api import status as st
from tuneop.api.spec import job_spec
from tuneop.decide.goodput import REFRESH_SECONDS
from tuneop.decide.patch import UNWATCHED_RECHECK_SECONDS, Decision
from tuneop.run.runtime import FINISHED_RECHECK_SECONDS, next_pass
from tuneop.run.watched import Watched

from tests.unit.fakes import QUOTA_REFUSAL
from tests.unit.operator_world import QUEUE, World, gate, start, unschedulable


def due(decision: Decision) -> float:
    assert decision.requeue_after is not None, "no deadline: the job would wait for the resync"
    return decision.requeue_after


def test_a_pending_group_is_judged_in_the_pass_due_at_its_pending_timeout():
    w = World(pendingTimeoutSeconds=60)
    w.step()
    unschedulable(w)
    d = w.step()
    assert 55 < due(d) <= 61
    d = w.step(due(d))
    assert w.condition(st.COND_STALLED)["status"] == "True"


def test_a_running_group_is_judged_in_the_pass_due_at_its_stall_timeout():
    w = World(stallTimeoutSeconds=900)
    start(w)
    w.progress(trial_id="t0", step=1)
    d = w.step(100)  # a steady pass, long after the report: no tick needed since
    assert w.condition(st.COND_STALLED)["status"] == "False"
    stall_left = 900 - 100 + 1
    assert due(d) <= stall_left
    passes = 0
    while w.condition(st.COND_STALLED)["status"] != "True":
        d = w.step(due(d))  # the goodput refresh comes first, then the stall
        passes += 1
        assert passes <= stall_left / REFRESH_SECONDS + 2
    stalled = w.condition(st.COND_STALLED)
    assert stalled["reason"] == "NoProgress" and "stallTimeoutSeconds=900" in stalled["message"]


def test_a_job_passes_until_it_settles_then_rests_until_its_deadline():
    w = World(stallTimeoutSeconds=900)
    w.step()
    w.run_pods()
    d = w.step()
    assert d.status and next_pass(d, job_spec(w.job), list(w.pods.values()), 300) == 0
    d = w.step()  # nothing new: settled
    assert not d.status and not d.events and not d.writes_children
    assert due(d) > 800  # the stall timeout, nothing sooner
    assert next_pass(d, job_spec(w.job), list(w.pods.values()), 300) == 300  # the resync


def test_a_steady_report_costs_one_pass_not_two():
    """A pass that only copies the trainer's report leaves nothing for a next pass: the
    job waits for its deadline (or the next report) at once."""
    w = World(stallTimeoutSeconds=900)
    start(w)
    w.progress(trial_id="t0", step=1)
    w.step(1)
    w.step(1)  # the first report also changes the message: a pass until settled
    w.progress(trial_id="t0", step=5)
    d = w.step(5)
    assert d.status and set(d.status) <= st.REPORTED, d.status
    wait = next_pass(d, job_spec(w.job), list(w.pods.values()), 300)
    assert wait == min(300, due(d)) > 60


def test_running_pods_keep_goodput_fresh_and_nothing_else_ticks():
    w = World(distribution={"workers": 1, "gpusPerWorker": 2})
    start(w)
    for pod in w.pods.values():  # the kubelet's start time: GPU seconds count from it
        pod["status"]["startTime"] = st.rfc3339(w.now)
    d = w.step()
    assert due(d) == pytest.approx(REFRESH_SECONDS, abs=2)  # far beyond a 2-second tick
    updated = w.status[st.GOODPUT][st.GOODPUT_UPDATED]
    w.step(due(d))
    assert w.status[st.GOODPUT][st.GOODPUT_UPDATED] != updated


def test_goodput_rides_on_each_reports_patch_and_costs_no_patch_of_its_own():
    """GPUs held, a report every 60 s (the default interval), each pass at the deadline
    its decision asked for or at the report, whichever comes first: every status patch
    is a report's (goodput refreshed with it), none a refresh's own."""
    w = World(distribution={"workers": 1, "gpusPerWorker": 2}, stallTimeoutSeconds=900)
    start(w)
    for pod in w.pods.values():  # the kubelet's start time: GPU seconds count from it
        pod["status"]["startTime"] = st.rfc3339(w.now)
    w.progress(trial_id="t0", step=1)
    d = w.step(1)
    d = w.step(1)  # settled
    patches, refreshed, report_in, step = [], [], 60.0, 1
    for _ in range(30):
        wait = min(due(d), report_in)
        report_in -= wait
        if report_in <= 0:
            step, report_in = step + 5, 60.0
            w.progress(trial_id="t0", step=step)
        d = w.step(wait)
        patches += [bool(d.status)]
        refreshed += [st.GOODPUT in d.status]
    reports = step // 5
    assert reports >= 10
    assert sum(patches) == reports  # one patch a report, none of the refresh's own
    assert sum(refreshed) >= reports - 1  # the share refreshed with (nearly) each


def test_a_failure_backoff_ends_in_the_pass_due_then():
    w = World()
    start(w)
    w.terminate("j-worker-0", 1, "boom")
    d = w.step()
    assert due(d) == pytest.approx(10)  # failurePolicy.backoffSeconds
    w.gc_deleted()
    d = w.step(due(d))
    assert d.create_pods == [0]


def test_a_queued_group_rereads_its_workloads_message_now_and_then():
    w = World()
    w.job["metadata"]["labels"] = dict(QUEUE)
    w.step()
    gate(w)
    d = w.step()
    assert w.condition(st.COND_QUEUED)["status"] == "True"
    assert due(d) <= UNWATCHED_RECHECK_SECONDS


def decision(**fields: object) -> Decision:
    made = Decision()
    for key, value in fields.items():
        setattr(made, key, value)
    return made


@pytest.mark.parametrize(
    ("fields", "suspend", "expected"),
    [
        ({}, False, 300.0),  # no deadline: the resync
        ({"requeue_after": 42.0}, False, 42.0),
        ({"requeue_after": 4200.0}, False, 300.0),
        ({"create_pods": [0]}, False, 0.0),  # what it wrote is read back soon
        ({"status": {"attempt": 1}}, False, 0.0),  # it changed something: not settled
        ({"status": {"attempt": 1}, "requeue_after": 42.0}, False, 0.0),
        ({"delete_job": True}, False, 0.0),
        ({"finished": True}, False, FINISHED_RECHECK_SECONDS),
        ({"finished": True, "requeue_after": 30.0}, False, 30.0),  # the TTL
        ({"finished": True, "delete_pods": ["p"]}, False, FINISHED_RECHECK_SECONDS),
        ({}, True, FINISHED_RECHECK_SECONDS),  # suspended, nothing left running
    ],
)
def test_the_next_timed_pass(fields: dict[str, object], suspend: bool, expected: float):
    spec = job_spec(World(suspend=suspend).job)
    assert next_pass(decision(**fields), spec, [], 300.0) == expected


def node(name: str, ready: str, beat: str = "t0") -> dict[str, object]:
    condition = {"type": "Ready", "status": ready, "lastHeartbeatTime": beat}
    return {"metadata": {"name": name}, "status": {"conditions": [condition]}}


def test_a_node_changing_readiness_wakes_the_jobs_with_a_pod_on_it():
    watched = Watched()
    pod = {"metadata": {"name": "p", "uid": "1"}, "spec": {"nodeName": "n1"}}
    watched.pod_event(("ns", "a"), pod, deleted=False)
    other = {"metadata": {"name": "q", "uid": "2"}, "spec": {"nodeName": "n2"}}
    watched.pod_event(("ns", "b"), other, deleted=False)
    assert watched.node_event(node("n1", "True"), deleted=False) == [("ns", "a")]
    assert watched.node_event(node("n1", "True", beat="t1"), deleted=False) == []  # heartbeat
    assert watched.node_event(node("n1", "Unknown"), deleted=False) == [("ns", "a")]
    assert watched.node_event(node("n1", "Unknown"), deleted=True) == [("ns", "a")]
    assert watched.node_event(node("n3", "True"), deleted=False) == []


def script_world(configmap: dict[str, object]) -> World:
    w = World(script={"configMap": configmap})
    del w.job["spec"]["hypermodel"]
    return w


def test_what_no_watch_reports_is_looked_at_again_soon():
    """The user's script ConfigMap (missing, then found without the script) and a quota
    that refused the pods send the operator no event: the pass is due again within
    UNWATCHED_RECHECK_SECONDS, and that pass sees the fix."""
    w = script_world({"name": "search"})
    d = w.step()
    assert w.condition(st.COND_RUNNING)["reason"] == "ScriptConfigMapMissing"
    assert due(d) <= UNWATCHED_RECHECK_SECONDS
    w.configmaps["search"] = {"data": {"a.py": "", "b.py": ""}}  # which one is the script?
    d = w.step(due(d))
    assert w.status["phase"] == st.PHASE_FAILED and due(d) <= UNWATCHED_RECHECK_SECONDS
    w.configmaps["search"] = {"data": {"search.py": "import keras_tuner"}}
    d = w.step(due(d))
    assert w.status["phase"] == st.PHASE_PENDING  # reopened

    w = World()
    w.kube.refuse_pods = QUOTA_REFUSAL
    d = w.step()
    assert w.pods == {} and due(d) <= UNWATCHED_RECHECK_SECONDS
    w.kube.refuse_pods = None  # the quota is raised
    w.step(due(d))
    assert set(w.pods) == {"j-worker-0"}
