"""The level-based decision, as a pure function: given what one pass read (the
TuningJob, its pods, what is known of their nodes, ...: decide.observed), return what to
change, with the objects to create rendered. No API calls here: act.executor applies a
Decision; tests/unit/test_operator_*.py drive this function
through whole scenarios (preemption, failures and backoff, budgets, suspend, restore
reporting, stall, TTL, parallel trials, Kueue).

One path for every job: a job is a list of pod groups (decide.job_groups: a sequential
job's one trainer group, or parallel trials' oracle and trial groups), each started,
followed and judged by the same rules (decide.group, decide.budgets, decide.stall,
decide.refusal), each recreated on its own. The job ends when its trial groups have all
completed (the final summary from the sequential trainer or t0), when a budget is spent,
on an invalid spec or by stallPolicy Fail.

Idempotence: counters move only together with a group's pod group index (`attempt`)
in one status patch, which the executor writes before it deletes anything; pods of an
older group are deleted without being counted again. Pods are created (by name, 409 is
fine) before the group is recorded as started, so a restart between the two creates
nothing twice and counts nothing."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from tuneop_contract.spec import JobSpec, SpecError

from ..api import status as st
from ..api.groups import pod_groups, sequential_group
from ..api.owners import foreign
from ..api.queue import QUEUED
from ..api.spec import check_existing_claim, job_spec, validate
from .classify import attempt_of, needs_node
from .desired import rendered
from .elastic import drop_probes, follow_probe, follow_shape
from .group import (
    backoff_wait,
    classify_group,
    held_pods,
    queued_condition,
    run_group,
    start_group,
)
from .job import (
    INVALID_SPEC_PREFIX,
    ScriptCheck,
    apply_final,
    best_text,
    delete_alive,
    finish,
    script_error,
    script_missing,
    ttl,
    wait_for_script,
)
from .job_groups import JobGroups, read_groups
from .lifecycle import stop_phase
from .observed import Observed
from .patch import Decision, Draft
from .refusal import held_from, hold_back, refused_stuck
from .report import NOT_FOLLOWED, record_states, report
from .slot import OLD_PODS_TERMINATING, GroupResult, Slot
from .stall import apply_stall_policy, judge_stall, running_stuck, waiting_stuck

Obj = dict[str, Any]

__all__ = ["decide", "nodes_to_read"]


def nodes_to_read(job: Obj, pods: list[Obj], spec: JobSpec | None = None) -> list[str]:
    """The nodes `decide` will consult: those of the running pod groups' pods that are
    bound and have not ended. Nothing while no group runs or once the job is finished.
    `spec`: the job's parsed spec (parsed here when not given)."""
    status = job.get("status") or {}
    if status.get(st.PHASE) in st.TERMINAL_PHASES:
        return []
    spec = spec or job_spec(job)
    name = job["metadata"]["name"]
    attempts: dict[str, str] = {}  # pod name -> the attempt of its group that runs
    if spec.parallel:
        entries = {
            e.get(st.GROUP_NAME): e for e in status.get(st.GROUPS) or [] if isinstance(e, dict)
        }
        for group in pod_groups(name, spec):
            entry = entries.get(group.name) or {}
            if entry.get(st.GROUP_STARTED):
                for pod_name in group.pod_names:
                    attempts[pod_name] = str(st.int_of(entry.get(st.ATTEMPT)))
    elif status.get(st.ATTEMPT_STARTED):
        for pod_name in sequential_group(name, spec).pod_names:
            attempts[pod_name] = str(st.int_of(status.get(st.ATTEMPT)))
    return sorted(
        {
            str(pod["spec"]["nodeName"])
            for pod in pods
            if attempts.get(pod["metadata"]["name"]) == attempt_of(pod)
            and not foreign(pod, job)
            and needs_node(pod)
        }
    )


def decide(seen: Observed) -> Decision:
    """What to do next for the job `seen` read (decide.observed), with the objects to
    create already rendered (decide.desired)."""
    draft = Draft(seen)
    spec = seen.spec
    draft.put(st.OBSERVED_GENERATION, draft.generation)
    for counter in st.COUNTERS:
        if draft.get(counter) is None:
            draft.put(counter, 0)
    if draft.get(st.PHASE) is None:
        draft.put(st.PHASE, st.PHASE_PENDING)
    groups = read_groups(draft)

    @functools.cache
    def bad_script() -> SpecError | None:
        # asked only where it matters (a group to start, a rejected job to reopen): the
        # script's ConfigMap is then read (run.runtime reads it on first use)
        claim = seen.claim if spec.parallel else None
        return script_error(seen) or (
            check_existing_claim(spec, claim) if claim is not None else None
        )

    errors = validate(spec.at_shape(0))  # the job as written, whatever shape is in use
    if not stop_phase(draft, groups, errors, bad_script):
        _run_groups(draft, groups, bad_script)
    if not groups.keep_probes:
        drop_probes(draft, groups.probes)
    groups.write_entries(draft)
    _close_ledger(draft)
    return rendered(draft.decision, seen.job, spec, seen.settings, seen.now)


def _close_ledger(draft: Draft) -> None:
    """status.goodput, when it changed or is due, and the running pods' next refresh."""
    goodput = draft.ledger.finish(patching=bool(draft.decision.status))
    if goodput is not None:
        draft.put(st.GOODPUT, goodput)
    if draft.ledger.due is not None:
        draft.decision.wake_within(draft.ledger.due)
    draft.decision.recoveries = draft.ledger.recoveries


def _run_groups(draft: Draft, groups: JobGroups, bad_script: ScriptCheck) -> None:
    """Start the groups that wait, follow the running ones, judge stalls, and report;
    the job succeeds once every trial group has completed."""
    results: dict[str, GroupResult] = {}
    if _start_groups(draft, groups, bad_script, results):
        return
    if _follow_groups(draft, groups, results):
        return
    follow_shape(draft, groups, results)
    if _judge_stalls(draft, groups, results):
        return
    follow_probe(draft, groups, results)
    record_states(groups, results)
    if all(_completed(s, results) for s in groups.trial_slots):
        delete_alive(draft, groups.every_current, keep_ended=True)
        message = f"search completed: {best_text(draft)}"
        finish(draft, succeeded=True, reason="Completed", message=message)
        ttl(draft)
        return
    report(draft, groups, results)


def _completed(slot: Slot, results: Mapping[str, GroupResult]) -> bool:
    result = results.get(slot.group.name)
    return bool(slot.get(st.GROUP_COMPLETED)) or (result is not None and result.kind == "completed")


def _start_groups(
    draft: Draft,
    groups: JobGroups,
    bad_script: ScriptCheck,
    results: dict[str, GroupResult],
) -> bool:
    """Start each group that has not started nor completed, or say what it waits for
    (into `results`). True: the job failed (an invalid script or claim)."""
    held = held_from(groups.slots, draft.seen.refused)
    for index, slot in enumerate(groups.slots):
        if slot.started or slot.get(st.GROUP_COMPLETED):
            continue
        result = _waits(draft, slot, groups, bad_script)
        if result is None:
            result = _create(draft, slot, groups, held, index)
        if result.kind == "invalid":
            delete_alive(draft, groups.every_current)
            finish(draft, succeeded=False, reason="InvalidSpec", message=result.message)
            return True
        if result.kind != "refused":
            slot.put(st.PODS_REFUSED, None)
        results[slot.group.name] = result
    return False


def _waits(
    draft: Draft, slot: Slot, groups: JobGroups, bad_script: ScriptCheck
) -> GroupResult | None:
    """What a group that is to start waits for (None: nothing)."""
    mine = groups.stale_of(slot)
    if mine:
        summary = f"waiting for {len(mine)} old trainer pod(s) to terminate"
        return GroupResult("waiting", OLD_PODS_TERMINATING, summary, summary)
    if groups.others:
        name = draft.seen.name
        summary = f"waiting for {len(groups.others)} pod(s) of an earlier TuningJob {name!r}"
        return GroupResult("waiting", "EarlierJobPods", summary, summary)
    waiting = backoff_wait(draft, slot)
    if waiting is not None:
        return GroupResult("waiting", "Backoff", waiting, waiting)
    invalid = bad_script()
    if invalid is not None:
        return GroupResult("invalid", message=INVALID_SPEC_PREFIX + str(invalid))
    if script_missing(draft.seen):
        wait_for_script(draft)
        return GroupResult("waiting", "ScriptConfigMapMissing", "the script's ConfigMap")
    return None


def _create(
    draft: Draft, slot: Slot, groups: JobGroups, held: int | None, index: int
) -> GroupResult:
    """Create the group's pods (kind "started"), unless a refusal holds it back (`held`:
    the index of the first group held, decide.refusal)."""
    refused = draft.seen.refused
    if refused is not None and held is not None and index >= held:
        delete_alive(draft, list(groups.current[slot.group.name].values()))
        if index == held:
            return hold_back(draft, slot, refused)
        first = groups.slots[held].label
        summary = f"waiting until the {first} pod group can be created"
        return GroupResult("waiting", "GroupRefused", summary, summary)
    start_group(draft, slot)
    if not draft.get(st.START_TIME):
        draft.put(st.START_TIME, st.rfc3339(draft.now))
    progress = groups.progress[slot.group.name]
    if slot.attempt > 0 or groups.parallel:
        slot.put(st.RESTORE_BASELINE, progress.count("restores") or 0)
    if slot.attempt > 0 and not groups.parallel:
        # what the new trainer reports from now on is about this group
        draft.write(
            st.PROGRESS,
            {
                **(draft.body.get(st.PROGRESS) or {}),
                "resumedFromStep": None,
                "resumedFromEpoch": None,
            },
        )
    workers = len(slot.group.pod_names)
    summary = f"starting {slot.label} pod group {slot.attempt} ({workers} worker(s))"
    return GroupResult("started", "PodsPending", "created", summary)


def _follow_groups(draft: Draft, groups: JobGroups, results: dict[str, GroupResult]) -> bool:
    """Each started group that has not completed: what its pods say (into `results`);
    the final group's completion gives the final result. True: the job ended (a budget
    spent, an InvalidSpec)."""
    for slot in groups.slots:
        if slot.group.name in results or slot.get(st.GROUP_COMPLETED):
            continue  # started in this pass, or done
        group_pods = groups.current[slot.group.name]
        outcomes = classify_group(slot, group_pods, draft.seen.nodes, draft.seen.last_seen)
        held = held_pods(slot, group_pods, draft.seen.last_seen)
        progress = groups.progress[slot.group.name]
        result = run_group(draft, slot, group_pods, outcomes, progress, held)
        if result.kind == "ended":  # a budget is spent: the job failed
            delete_alive(draft, groups.every_current)
            return True
        if result.kind == "invalid":
            delete_alive(draft, groups.every_current)
            finish(draft, succeeded=False, reason="InvalidSpec", message=result.message)
            return True
        if result.kind == "completed":
            slot.put(st.GROUP_COMPLETED, True)
            delete_alive(draft, list(group_pods.values()), keep_ended=True)
            if slot is groups.final_slot and result.chief is not None:
                apply_final(draft, result.chief)  # it ran the post-search work
        results[slot.group.name] = result
    return False


def _judge_stalls(draft: Draft, groups: JobGroups, results: dict[str, GroupResult]) -> bool:
    """Condition Queued, and the groups judged for Stalled (running trial groups against
    their progress, waiting groups against their start, refused ones against their first
    refusal; not while Kueue holds them), with the stall policy for the group that just
    became Stalled. True: the job ended (stallPolicy Fail)."""
    candidates = []
    for slot in groups.slots:
        outcome = results.get(slot.group.name)
        if slot.get(st.GROUP_COMPLETED) or outcome is None:
            continue
        if outcome.kind == "running" and not slot.group.oracle:
            candidates.append(running_stuck(draft, slot, slot.get(st.LAST_PROGRESS_TIME)))
        elif (outcome.kind in ("pending", "terminating") and outcome.reason != QUEUED
              and outcome.judged):  # fmt: skip
            candidates.append(waiting_stuck(draft, slot, outcome))
        elif outcome.kind == "refused":
            candidates.append(refused_stuck(draft, slot, outcome))
    queued = [
        (f"{slot.group.name}: " if groups.parallel else "") + result.message
        for slot in groups.slots
        if (result := results.get(slot.group.name)) is not None
        and result.kind == "pending"
        and result.reason == QUEUED
    ]
    if any(r.kind not in NOT_FOLLOWED for r in results.values()):
        # only a group whose pods were read says whether Kueue holds it
        queued_condition(draft, "; ".join(queued) if queued else None)
    stalled = judge_stall(draft, candidates)
    if stalled is None:
        return False
    acted = apply_stall_policy(draft, stalled, groups.current[stalled.slot.group.name])
    if acted is not None and acted.kind == "ended":
        delete_alive(draft, groups.every_current)
        return True
    if acted is not None:
        results[stalled.slot.group.name] = acted
    return False
