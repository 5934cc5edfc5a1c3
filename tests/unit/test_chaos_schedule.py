"""The chaos soak's pure parts (bench/chaos): the seeded schedule and job mix, the
invariant checks fed a violation, the fault matrix, the Kueue queue objects and what a
watch of the queued pods makes of Kueue's marks, the Kueue faults skipping without
Kueue, and the soak's own code style (no function over 60 lines)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
from pathlib import Path
from typing import Any, cast

import pytest
from tuneop.api import queue as kq

from bench.chaos import core, faults, jobkinds, matrix, registry
from bench.chaos import invariants as inv
from bench.chaos import queues as q
from bench.chaos import schedule as s
from bench.chaos.ledger import SKIPPED, FaultRecord, Hit, Ledger

ROOT = Path(__file__).resolve().parents[2]
LIMITS = s.Limits(duration=3600, slots=12)
JOB = inv.JobRef("ns", "uid-1", jobkinds.STANDIN)


def test_the_schedule_is_reproducible_from_its_seed():
    assert s.plan(7, LIMITS) == s.plan(7, LIMITS)
    assert s.plan(7, LIMITS) != s.plan(8, LIMITS)


def test_the_schedule_is_bounded_in_count_and_time():
    for seed in range(20):
        plan = s.plan(seed, LIMITS)
        assert 0 < len(plan) <= LIMITS.max_faults
        assert all(LIMITS.warmup <= f.at and f.end <= LIMITS.duration - LIMITS.tail for f in plan)
        assert all(0 <= f.slot < LIMITS.slots and f.kind in s.FAULT_KINDS for f in plan)
    few = s.plan(1, s.Limits(duration=3600, slots=4, max_faults=10))
    assert len(few) == 10


def test_the_schedule_overlaps_faults_and_draws_every_kind_in_an_hour():
    plan = s.plan(3, LIMITS)
    assert s.overlapping(plan) >= len(plan) // 4
    assert {f.kind for f in plan} == set(s.FAULT_KINDS)
    short = s.plan(3, s.Limits(duration=180, slots=3, warmup=30, tail=30))
    assert len(short) >= 2 and s.overlapping(short) >= 1


def test_a_shorter_burst_gap_plans_more_faults_an_hour():
    dense = dataclasses.replace(LIMITS, burst_gap=(8.0, 24.0))
    for seed in range(5):
        assert len(s.plan(seed, dense)) > 1.5 * len(s.plan(seed, LIMITS))
    config = core.SoakConfig(duration=3600, seed=1, jobs=12, burst_gap=(8.0, 24.0))
    assert config.limits().burst_gap == (8.0, 24.0)


def test_exclusive_kinds_never_overlap():
    plan = s.plan(5, LIMITS)
    for group in set(s.EXCLUSIVE.values()):
        faults = [f for f in plan if s.EXCLUSIVE.get(f.kind) == group]
        for a, b in itertools.pairwise(faults):
            assert b.at >= a.end, (a, b)


def test_the_kueue_kinds_are_built_drawn_and_never_overlap_in_their_groups():
    kueue_kinds = {s.KUEUE_PREEMPT, s.KUEUE_CONTROLLER_RESTART, s.QUOTA_SHRINK}
    assert kueue_kinds <= set(s.FAULT_KINDS) and not kueue_kinds & set(s.NOT_BUILT)
    assert set(registry.FAULTS) == set(s.FAULT_KINDS) == set(s.HOLD_SECONDS)
    assert s.KUEUE_CONTROLLER_RESTART in s.CLUSTER_WIDE
    assert s.EXCLUSIVE[s.KUEUE_PREEMPT] == s.EXCLUSIVE[s.QUOTA_SHRINK] == "quota"
    for seed in range(5):
        plan = s.plan(seed, LIMITS)
        assert kueue_kinds <= {f.kind for f in plan}
        for kinds in ({s.KUEUE_PREEMPT, s.QUOTA_SHRINK}, {s.KUEUE_CONTROLLER_RESTART}):
            one_at_a_time = [f for f in plan if f.kind in kinds]
            assert len(one_at_a_time) >= 2
            for a, b in itertools.pairwise(one_at_a_time):
                assert b.at >= a.end, (a, b)
    only = s.plan(2, LIMITS, (s.KUEUE_PREEMPT, s.QUOTA_SHRINK, s.KUEUE_CONTROLLER_RESTART))
    assert all(f.hold > 0 for f in only)


def test_the_job_mix_covers_every_kind_and_is_seeded():
    mix = jobkinds.job_mix(4, 8)
    assert len(mix) == 8 and set(mix) == set(jobkinds.JOB_KINDS)
    assert mix == jobkinds.job_mix(4, 8)
    for kind in jobkinds.JOB_KINDS:
        doc = jobkinds.document(kind, "ns", adopt=True)
        assert doc["spec"]["failurePolicy"]["maxPreemptions"] == jobkinds.MAX_PREEMPTIONS
        assert doc["spec"]["checkpoint"]["adopt"] is True


def test_a_queued_job_is_the_stand_in_sent_to_the_soaks_local_queue():
    doc = jobkinds.document(jobkinds.QUEUED, "ns")
    assert doc["metadata"]["labels"][kq.QUEUE_LABEL] == jobkinds.LOCAL_QUEUE
    assert doc["metadata"]["labels"]["tuneop.io/chaos-kind"] == jobkinds.QUEUED
    again = jobkinds.document(jobkinds.QUEUED, "ns", adopt=True)  # re-created: queued again
    assert again["metadata"]["labels"][kq.QUEUE_LABEL] == jobkinds.LOCAL_QUEUE
    assert jobkinds.spec_fields(jobkinds.QUEUED) == jobkinds.spec_fields(jobkinds.STANDIN)
    assert jobkinds.known(jobkinds.QUEUED) == jobkinds.known(jobkinds.STANDIN) is not None
    for kind in set(jobkinds.JOB_KINDS) - {jobkinds.QUEUED}:
        assert kq.QUEUE_LABEL not in jobkinds.document(kind, "ns")["metadata"]["labels"]
    assert jobkinds.QUEUED in jobkinds.job_mix(1, len(jobkinds.JOB_KINDS))


def test_the_queue_objects_quota_and_preemptor():
    cq = q.cluster_queue(12)
    assert cq["spec"]["preemption"] == {"withinClusterQueue": "LowerPriority"}
    (group,) = cq["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    assert flavor["name"] == q.flavor()["metadata"]["name"]
    assert {r["name"]: r["nominalQuota"] for r in flavor["resources"]}[q.GPU] == 12
    assert set(group["coveredResources"]) == {r["name"] for r in flavor["resources"]}
    assert q.local_queue("ns")["spec"]["clusterQueue"] == cq["metadata"]["name"]
    assert q.local_queue("ns")["metadata"] == {"name": jobkinds.LOCAL_QUEUE, "namespace": "ns"}
    pod = q.preemptor_pod("p", "chaos-kueue-1", 5)
    assert pod["metadata"]["labels"][kq.QUEUE_LABEL] == jobkinds.LOCAL_QUEUE
    assert pod["spec"]["priorityClassName"] == q.preemptor_class()["metadata"]["name"]
    assert q.preemptor_class()["preemptionPolicy"] == "Never"  # Kueue's preemption only
    assert q.preemptor_class()["value"] > 0 and q.pod_gpus(pod) == 5
    status = {"flavorsReservation": [{"name": q.FLAVOR, "resources": [
        {"name": "cpu", "total": "3"}, {"name": q.GPU, "total": "3"}]}]}  # fmt: skip
    assert q.reserved_gpus({"status": status}) == 3 and q.reserved_gpus({}) == 0


def queued_pod(name: str, **status: object) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "7", "labels": {"tuneop.io/tuningjob": "search"}},
            "spec": {}, "status": {"phase": "Running", **status}}  # fmt: skip


def test_the_watch_takes_the_pods_kueue_marked_and_sees_the_preemptor_admitted():
    seen = q.Evictions("1")
    preemptor = ("chaos-kueue-1", "kueue-preemptor-1")
    gated = {"metadata": {"name": preemptor[1], "namespace": preemptor[0], "uid": "p",
                          "resourceVersion": "5"},
             "spec": {"schedulingGates": [{"name": kq.ADMISSION_GATE}]}}  # fmt: skip
    marked = queued_pod("a", conditions=[{"type": "TerminationTarget", "status": "True",
                                          "reason": "WorkloadEvictedDueToPreempted"}])  # fmt: skip
    seen.note({"type": "ADDED", "raw_object": gated}, preemptor)
    seen.note({"type": "MODIFIED", "raw_object": queued_pod("b")}, preemptor)
    assert not seen.admitted and not seen.victims
    seen.note({"type": "MODIFIED", "raw_object": marked}, preemptor)
    later = {**marked, "metadata": {**marked["metadata"], "deletionTimestamp": "now"}}
    seen.note({"type": "MODIFIED", "raw_object": later}, preemptor)
    assert list(seen.victims) == ["uid-a"] and seen.victims["uid-a"] is marked  # first seen
    assert faults.hit(seen.victims["uid-a"], queue=True).clean
    admitted = {**gated, "spec": {}}
    seen.note({"type": "MODIFIED", "raw_object": admitted}, preemptor)
    assert seen.admitted and seen.resource_version == "5"


def context(kind: str, queues: q.Queues | None) -> faults.Context:
    """A context the Kueue faults can only skip with: no cluster behind it."""
    nothing: Any = None
    return faults.Context(nothing, nothing, Ledger(), [faults.SlotJob(0, kind)], 0.0, queues)


def test_the_soak_runs_without_kueue_unless_given_one():
    assert inspect.signature(core.Soak).parameters["kueue"].default is None
    assert inspect.signature(faults.Context).parameters["queues"].default is None


def test_the_kueue_faults_skip_without_kueue_or_a_queued_job():
    for kind in (s.KUEUE_PREEMPT, s.KUEUE_CONTROLLER_RESTART, s.QUOTA_SHRINK):
        record = FaultRecord(kind, 0, 50.0)
        registry.FAULTS[kind](context(jobkinds.QUEUED, None), record, s.Planned(50.0, kind, 0, 10))
        assert (record.outcome, record.detail) == (SKIPPED, "no Kueue in this soak")
    queues = q.Queues(kueue=cast(Any, None))
    for kind in (s.KUEUE_PREEMPT, s.QUOTA_SHRINK):
        record = FaultRecord(kind, 0, 50.0)
        registry.FAULTS[kind](context(jobkinds.STANDIN, queues), record,
                            s.Planned(50.0, kind, 0, 10))  # fmt: skip
        assert record.outcome == SKIPPED and "not queued" in record.detail


def test_a_kueue_fault_planned_on_an_unqueued_job_moves_to_a_queued_one():
    ctx = context(jobkinds.STANDIN, None)
    ctx.slots.append(faults.SlotJob(1, jobkinds.QUEUED, "ns-q", "uid-q"))
    record = FaultRecord(s.QUOTA_SHRINK, 0, 50.0, jobkinds.STANDIN, "ns-0", "uid-0")
    slot = faults.queued_slot(ctx, record, s.Planned(50.0, s.QUOTA_SHRINK, 0, 10))
    assert slot.index == 1 and (record.slot, record.job_kind, record.uid) == (
        1, jobkinds.QUEUED, "uid-q",
    )  # fmt: skip
    alone = context(jobkinds.STANDIN, None)
    kept = FaultRecord(s.QUOTA_SHRINK, 0, 50.0, jobkinds.STANDIN)
    assert faults.queued_slot(alone, kept, s.Planned(50.0, s.QUOTA_SHRINK, 0, 10)).index == 0
    assert kept.job_kind == jobkinds.STANDIN


def hit(group: str = "trainer", attempt: str = "0", clean: bool = True, queue: bool = False) -> Hit:
    return Hit("ns", "uid-1", group, attempt, clean, queue)


def test_expected_preemptions_count_distinct_pod_groups():
    hits = [hit(), hit(), hit(attempt="1", clean=False), hit("t0", "0")]
    assert inv.expected_preemptions(hits) == (2, 3)


def test_a_hit_on_a_trainer_that_ends_its_search_under_the_signal_may_go_uncounted():
    pod = {
        "metadata": {"namespace": "ns", "name": "search-worker-0", "labels": {},
                     "ownerReferences": [{"kind": "TuningJob", "uid": "uid-1"}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    assert faults.hit(pod).clean
    assert not faults.hit(pod, exit_code=0).clean and faults.hit(pod, exit_code=75).clean
    terminating = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "now"}}
    assert not faults.hit(terminating).clean
    assert inv.expected_preemptions([faults.hit(pod, exit_code=0)]) == (0, 1)


def test_a_hit_during_a_suspension_of_its_job_may_go_uncounted():
    ledger = Ledger()
    drain = FaultRecord(s.NODE_DRAIN, 0, 47.5, namespace="ns", uid="uid-1", started=47.5,
                        ended=70.0, hits=[hit()])  # fmt: skip
    kill = FaultRecord(s.POD_SIGKILL, 0, 90.0, namespace="ns", uid="uid-1", started=90.0,
                       ended=90.5, hits=[hit(attempt="1")])  # fmt: skip
    ledger.add_fault(drain)
    ledger.add_fault(kill)
    assert inv.expected_preemptions(ledger.hits_of("ns", "uid-1")) == (2, 2)
    ledger.add_fault(FaultRecord(s.SUSPEND_RESUME, 0, 47.6, namespace="ns", uid="uid-1",
                                 started=47.6, ended=62.8))  # fmt: skip
    assert inv.expected_preemptions(ledger.hits_of("ns", "uid-1")) == (1, 2)
    assert inv.expected_preemptions(ledger.hits_of("ns", "other")) == (0, 0)


def test_a_hit_on_the_pod_group_that_ended_the_job_may_go_uncounted():
    hits = [hit(attempt="0"), hit(attempt="1"), hit("t0", "2"), hit("t1", "2")]
    ended = {"phase": "Succeeded", "attempt": 1,
             "groups": [{"name": "t0", "attempt": 3}, {"name": "t1", "attempt": 2}]}  # fmt: skip
    assert [h.clean for h in inv.settled(hits, ended)] == [True, False, True, False]
    assert all(h.clean for h in inv.settled(hits, {**ended, "phase": "Failed"}))
    seen = dataclasses.replace(hits[1], exit_seen=True)  # it exited 75: judged by that
    assert inv.settled([seen], ended)[0].clean


def test_a_fault_in_progress_holds_back_the_check_of_a_job_that_ended_after_it_began():
    ledger = Ledger()
    preempt = FaultRecord(s.SCHEDULER_PREEMPT, 2, 198.0, namespace="other", started=198.3)
    ledger.begin(preempt)
    assert ledger.in_progress_since(227.0) and not ledger.in_progress_since(198.0)
    preempt.hits.append(hit())  # its victims, known once the preemptor is bound
    ledger.add_fault(preempt)
    assert not ledger.in_progress_since(227.0)
    assert inv.expected_preemptions(ledger.hits_of("ns", "uid-1")) == (1, 1)


def status(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "phase": "Succeeded", "preemptions": 1, "failures": 0, "restarts": 1, "restores": 1,
        "trialsCompleted": 3, "trialsTotal": 3,
        "bestTrial": {"id": "0002", "score": 2 / 3},
    }  # fmt: skip
    return {**base, **fields}


def test_counters_match_the_faults_or_are_flagged():
    assert inv.check_counters(JOB, status(), [hit()], 0, False) == []
    flagged = {v.invariant for v in inv.check_counters(JOB, status(preemptions=2, restarts=2),
                                                       [hit()], 0, False)}  # fmt: skip
    assert flagged == {"preemptions"}
    failures = inv.check_counters(JOB, status(failures=1, restarts=2), [hit()], 0, False)
    assert {v.invariant for v in failures} == {"failures"}
    restores = inv.check_counters(JOB, status(restores=3), [hit()], 1, False)
    assert [v.invariant for v in restores] == ["restores"]
    # an elastic job's shape changes started pod groups 2..6, each restoring
    reshaped = status(restores=3, attempt=6)
    assert inv.check_counters(JOB, reshaped, [hit()], 0, False) == []


def test_queue_evictions_are_a_range_over_the_groups_kueue_evicted():
    evicted = [hit(queue=True), hit(queue=True), hit(attempt="1", queue=True, clean=False)]
    assert inv.expected_queue_evictions(evicted) == (1, 2)
    assert inv.expected_preemptions(evicted) == (1, 2)
    # a group another fault hit too is counted under whichever the operator saw first
    assert inv.expected_queue_evictions([hit(queue=True), hit()]) == (0, 1)
    assert inv.expected_queue_evictions([hit(), hit(attempt="1")]) == (0, 0)
    one = status(queueEvictions=1)  # one preemption, one restart, one queue eviction
    assert inv.check_counters(JOB, one, [hit(queue=True)], 0, False) == []
    assert inv.check_counters(JOB, status(queueEvictions=0), evicted[2:], 0, False) == []
    unexpected = inv.check_counters(JOB, one, [hit()], 0, False)
    assert [v.invariant for v in unexpected] == ["queueEvictions"]
    assert "expected 0..0" in unexpected[0].detail
    missed = inv.check_counters(JOB, status(), [hit(queue=True)], 0, False)
    assert [v.invariant for v in missed] == ["queueEvictions"]
    beyond = inv.check_counters(JOB, status(queueEvictions=2), evicted, 0, False)
    assert [v.detail for v in beyond] == ["2 > preemptions 1"]
    # an eviction is a restart like any disruption: restarts = preemptions + failures + stalls
    extra = inv.check_counters(JOB, status(queueEvictions=1, restarts=2), [hit(queue=True)], 0,
                               False)  # fmt: skip
    assert [v.invariant for v in extra] == ["restarts"]


def test_queue_evictions_never_go_backwards():
    history = inv.StatusHistory(JOB)
    assert history.observe(status(queueEvictions=1)) == []
    assert [v.invariant for v in history.observe(status(queueEvictions=0))] == ["monotone"]


def test_a_duplicated_or_missing_trial_is_flagged():
    results = {"trials": [{"trialId": "0000"}, {"trialId": "0001"}, {"trialId": "0002"}]}
    assert inv.check_trials(JOB, status(), results, None) == []
    twice = {"trials": [{"trialId": "0000"}, {"trialId": "0001"}, {"trialId": "0001"}]}
    found = inv.check_trials(JOB, status(), twice, None)
    assert found and "0001" in found[0].detail
    short = {"trials": results["trials"][:2]}
    assert [v.invariant for v in inv.check_trials(JOB, status(), short, None)] == ["trials-once"]
    assert inv.check_trials(JOB, status(), None, None)[0].invariant == "trials-once"


def test_a_known_result_must_be_reached():
    known = jobkinds.Known(3, "0002", 2 / 3)
    results = {"trials": [{"trialId": f"000{i}"} for i in range(3)]}
    assert inv.check_trials(JOB, status(), results, known) == []
    wrong = status(bestTrial={"id": "0001", "score": 1 / 3})
    assert [v.invariant for v in inv.check_trials(JOB, wrong, results, known)] == ["known-result"]


def test_a_status_moving_backwards_is_flagged():
    history = inv.StatusHistory(JOB)
    assert history.observe(status(trialsCompleted=2, bestTrial={"score": 0.5})) == []
    assert history.observe(status(trialsCompleted=3, bestTrial={"score": 0.7})) == []
    back = history.observe(status(trialsCompleted=2, bestTrial={"score": 0.6}))
    assert sorted(v.detail.split()[0] for v in back) == ["best", "trialsCompleted"]


def test_phase_memory_and_leftovers():
    assert inv.check_phase(JOB, status(), budget=5, low=1) == []
    assert (
        inv.check_phase(JOB, status(phase="Failed"), budget=5, low=1)[0].invariant == "honest-phase"
    )
    spent = status(phase="Failed", conditions=[
        {"type": "Failed", "status": "True", "reason": "PreemptionBudgetExceeded"}])  # fmt: skip
    assert inv.check_phase(JOB, spent, budget=1, low=2) == []
    assert inv.check_memory([100.0] * 9, 1024, "r") == []
    assert inv.check_memory([100.0] * 6 + [400.0] * 3, 1024, "r")[0].invariant == "memory"
    assert inv.check_memory([2000.0], 1024, "r")[0].invariant == "memory"
    assert inv.check_leftovers("ns", []) == []
    assert inv.check_leftovers("ns", ["pod/search-worker-0"])[0].invariant == "leftovers"


def test_the_matrix_counts_by_fault_and_job_kind():
    injected = FaultRecord(s.POD_EVICT, 0, 50.0, jobkinds.STANDIN, "ns", "uid-1",
                           hits=[hit()], recovery_seconds=4.0, steps_redone=7)  # fmt: skip
    skipped = FaultRecord(s.POD_EVICT, 0, 60.0, jobkinds.STANDIN, outcome=SKIPPED)
    rows = matrix.build([injected, skipped], [])
    assert rows == [{"fault": s.POD_EVICT, "job": jobkinds.STANDIN, "injected": 1,
                     "skipped": 1, "errors": 0, "survived": 1, "violations": 0,
                     "recovery_p50": 4.0, "recovery_max": 4.0,
                     "redone_p50": 7, "redone_max": 7}]  # fmt: skip
    bad = matrix.build([injected], [JOB.violation("trials-once", "x")])
    assert bad[0]["violations"] == 1 and bad[0]["survived"] == 0
    assert s.POD_EVICT in matrix.table(rows)


def test_steps_redone_are_counted_only_for_a_restore_of_the_trial_and_epoch_it_was_in():
    before = {"currentTrial": "0003", "progress": {"epoch": 2, "step": 40, "restores": 1}}
    resumed = {"resumedFromEpoch": 2, "resumedFromStep": 32, "restores": 2}
    restored = {"currentTrial": "0003", "progress": resumed}
    assert matrix.steps_redone(before, restored) == 8
    not_restored = {**restored, "progress": {**restored["progress"], "restores": 1}}
    assert matrix.steps_redone(before, not_restored) is None  # a stale resumedFromStep
    assert matrix.steps_redone(before, {**restored, "currentTrial": "0004"}) is None
    other_epoch = {**restored, "progress": {**restored["progress"], "resumedFromEpoch": 1}}
    assert matrix.steps_redone(before, other_epoch) is None
    assert matrix.steps_redone({"progress": {}}, restored) is None


@pytest.mark.parametrize("path", sorted((ROOT / "bench" / "chaos").glob("*.py")), ids=str)
def test_no_function_of_the_soak_is_over_60_lines(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            assert length <= 60, f"{path.name}:{node.name} is {length} lines"


class OutageEnv:
    """An Env (and its kubectl) whose API answers `before` calls, then refuses `down`,
    as during an API server or etcd restart."""

    def __init__(self, before: int, down: int) -> None:
        self.before, self.down, self.made, self.jobs = before, down, 0, {}
        self.kubectl = self

    def _call(self) -> None:
        if self.before:
            self.before -= 1
        elif self.down:
            self.down -= 1
            raise RuntimeError("connection refused")

    def namespace(self, prefix: str) -> str:
        self._call()
        self.made += 1
        return f"{prefix}-{self.made}"

    def apply(self, doc: dict[str, Any]) -> None:
        self._call()
        self.jobs.setdefault(doc["metadata"]["namespace"], {"metadata": {"uid": "uid-1"}})

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        self._call()
        return dict(self.jobs[namespace])

    def status(self, namespace: str, name: str = "search") -> dict[str, Any]:
        return {"phase": "Running"}


@pytest.mark.parametrize(("before", "down"), [(0, 2), (1, 1), (1, 3), (2, 2)])
def test_a_submission_an_outage_cut_short_is_completed_and_the_slot_keeps_a_job(
    before: int, down: int, monkeypatch: pytest.MonkeyPatch
):
    """Cut in making the namespace, applying the job or reading its uid: the churn
    completes it, in the namespace made (none left behind), and the slot has its job."""
    env = OutageEnv(before, down)
    nothing: Any = None
    ctx = faults.Context(cast(Any, env), nothing, Ledger(), [faults.SlotJob(0, jobkinds.STANDIN)],
                         0.0)  # fmt: skip
    soak = core.Soak.__new__(core.Soak)
    soak.ledger, soak.seen_ended = ctx.ledger, {}
    monkeypatch.setattr(core.time, "sleep", lambda _s: None)
    with pytest.raises(RuntimeError):
        soak.submit(ctx, ctx.slots[0])
    soak.churn(ctx, ctx.now() + 0.05, resubmit=True)
    slot = ctx.slots[0]
    assert slot.uid == "uid-1" and slot.namespace in env.jobs
    assert env.made == 1
