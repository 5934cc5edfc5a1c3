"""The chaos soak's pure parts (bench/chaos): the seeded schedule and job mix, the
invariant checks fed a violation, the fault matrix, and the soak's own code style (no
function over 60 lines)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from bench.chaos import faults, jobkinds, matrix
from bench.chaos import invariants as inv
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


def test_exclusive_kinds_never_overlap():
    plan = s.plan(5, LIMITS)
    for group in set(s.EXCLUSIVE.values()):
        faults = [f for f in plan if s.EXCLUSIVE.get(f.kind) == group]
        for a, b in itertools.pairwise(faults):
            assert b.at >= a.end, (a, b)


def test_the_job_mix_covers_every_kind_and_is_seeded():
    mix = jobkinds.job_mix(4, 8)
    assert len(mix) == 8 and set(mix) == set(jobkinds.JOB_KINDS)
    assert mix == jobkinds.job_mix(4, 8)
    for kind in jobkinds.JOB_KINDS:
        doc = jobkinds.document(kind, "ns", adopt=True)
        assert doc["spec"]["failurePolicy"]["maxPreemptions"] == jobkinds.MAX_PREEMPTIONS
        assert doc["spec"]["checkpoint"]["adopt"] is True


def hit(group: str = "trainer", attempt: str = "0", clean: bool = True) -> Hit:
    return Hit("ns", "uid-1", group, attempt, clean)


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
    assert not faults.hit(pod, finished=True).clean
    terminating = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "now"}}
    assert not faults.hit(terminating).clean
    assert inv.expected_preemptions([faults.hit(pod, finished=True)]) == (0, 1)


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
                           hits=[hit()], recovery_seconds=4.0)  # fmt: skip
    skipped = FaultRecord(s.POD_EVICT, 0, 60.0, jobkinds.STANDIN, outcome=SKIPPED)
    rows = matrix.build([injected, skipped], [])
    assert rows == [{"fault": s.POD_EVICT, "job": jobkinds.STANDIN, "injected": 1,
                     "skipped": 1, "errors": 0, "survived": 1, "violations": 0,
                     "recovery_p50": 4.0, "recovery_max": 4.0}]  # fmt: skip
    bad = matrix.build([injected], [JOB.violation("trials-once", "x")])
    assert bad[0]["violations"] == 1 and bad[0]["survived"] == 0
    assert s.POD_EVICT in matrix.table(rows)


@pytest.mark.parametrize("path", sorted((ROOT / "bench" / "chaos").glob("*.py")), ids=str)
def test_no_function_of_the_soak_is_over_60_lines(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            assert length <= 60, f"{path.name}:{node.name} is {length} lines"
