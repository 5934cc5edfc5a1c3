"""The decision for a job with parallel trials (`spec.parallelTrials > 1`), a pure
function like the sequential one (decide.reconcile), with the same rules applied to each
pod group on its own (decide.group).

The groups (api.groups) are the oracle, which serves keras-tuner's oracle over gRPC,
and trial groups t0..t<N-1>, each running one trial at a time as a keras-tuner worker.
A disrupted group is recreated alone, with a new pod group index in its
`status.groups` entry, and resumes its own trial (keras-tuner hands a returning tuner id
its ongoing trial; the trial's checkpoints are on the shared claim); the other groups
keep their pods. A lost oracle is recreated the same way while the trial groups wait
for it. Budgets (maxPreemptions, maxFailures, maxTrialOOMs) are the job's: each
disruption counts once, whichever group it hit. As in the sequential decision a group's
counters move together with its pod group index, in the one status patch written before
its pods are deleted.

The job succeeds when every trial group has completed: a trial group exits 0 only once
the oracle has said the search is over, t0 after the post-search work (results, best
model, a script's code after `search()`), whose termination message carries the final
summary. The oracle pod is then deleted if it still runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..api import names
from ..api import status as st
from ..api.groups import pod_groups
from ..api.owners import foreign
from ..api.progress import ProgressView
from ..api.progress import from_configmap as progress_from_configmap
from ..api.queue import QUEUED
from ..api.spec import JobSpec, SpecError, check_existing_claim, validate
from .group import (
    backoff_wait,
    classify_group,
    current_pods,
    held_pods,
    queued_condition,
    release_held,
    run_group,
    start_group,
)
from .job import (
    INVALID_SPEC_PREFIX,
    apply_final,
    apply_progress,
    best_text,
    copy_progress,
    delete_alive,
    finish,
    reopen_or_stay,
    resume_if_suspended,
    script_error,
    script_missing,
    suspend,
    ttl,
    wait_for_script,
)
from .patch import Decision, Draft
from .refusal import hold_back, refused_stuck
from .slot import GroupResult, Slot, gpus_per_pod
from .stall import apply_stall_policy, judge_stall, running_stuck, waiting_stuck

Obj = dict[str, Any]

REPORTED = (
    st.GROUP_TRIAL_ID,
    st.GROUP_EPOCH,
    st.GROUP_STEP,
    st.LAST_PROGRESS_TIME,
    st.LAST_CHECKPOINT_TIME,
)
"""What a group entry shows of its trainer's last record (the record's fields of the
same names)."""

STATE = {
    "completed": "Succeeded",
    "recreate": "Restarting",
    "terminating": "Terminating",
    "running": "Running",
    "pending": "Pending",
    "waiting": "Waiting",
    "refused": "Pending",
}


def _entries(draft: Draft, spec: JobSpec) -> dict[str, Obj]:
    """Each group's status.groups entry (a copy to update), by name; new groups start
    empty. Entries of anything else than a dict are dropped (status is writable)."""
    old = {e.get(st.GROUP_NAME): dict(e) for e in draft.get(st.GROUPS) or [] if isinstance(e, dict)}
    return {
        g.name: old.get(g.name) or {st.GROUP_NAME: g.name, st.ATTEMPT: 0}
        for g in pod_groups(draft.job["metadata"]["name"], spec)
    }


def _group_progress(
    draft: Draft, configmap: Obj | None, slot: Slot, ignored: list[str]
) -> ProgressView:
    """The group's own record, if its current pod group wrote it (an older trainer's
    record stays until the new one reports: it must not count as a restore)."""
    name = names.progress_configmap_name(draft.job["metadata"]["name"])
    view = progress_from_configmap(configmap, name, slot.group.tuner_id)
    if view is None:
        return ProgressView({})
    ignored.extend(view.ignored)
    reported = st.parse_time(view.text("lastProgressTime"))
    started = st.parse_time(slot.get(st.START_TIME))
    if reported is not None and started is not None and reported < started:
        return ProgressView({})
    return view


def _latest(values: list[Any]) -> str | None:
    times = [(st.parse_time(v), v) for v in values]
    known = [(t, v) for t, v in times if t is not None]
    return max(known)[1] if known else None


@dataclasses.dataclass
class _Groups:
    """A parallel job's pod groups in one pass: their bookkeeping, their trainers'
    records, and the job's pods sorted by what the pass does with them."""

    slots: list[Slot]
    """The oracle first, then the trial groups."""
    progress: dict[str, ProgressView]
    """Each group's own record, by group name."""
    pods: list[Obj]
    """The job's own pods (not those of an earlier job of the same name)."""
    others: list[Obj]
    """Pods of an earlier TuningJob of the same name, still terminating."""
    current: dict[str, dict[str, Obj]]
    """Each group's pods of its current attempt, by group name and pod name."""
    stale: list[Obj]
    """The job's pods of no group's current attempt."""
    every_current: list[Obj]
    """The pods of every group's current attempt as read (kept when a reopened job's
    groups start afresh)."""

    @property
    def trial_slots(self) -> list[Slot]:
        return [s for s in self.slots if not s.group.oracle]


def decide_parallel(
    draft: Draft,
    spec: JobSpec,
    pods: list[Obj],
    *,
    nodes: Mapping[str, Obj | None],
    last_seen: Mapping[str, Obj],
    configmaps: Mapping[str, Obj | None],
    progress_configmap: Obj | None,
    claim: Obj | None = None,
) -> Decision:
    """The parallel job's pass: the trainers' records into status, then stop what must
    stop (a finished, invalid or suspended job), else start the groups that wait and
    follow the running ones. Every group's entry goes into `status.groups`."""
    entries = _entries(draft, spec)
    slots = [
        Slot(draft, g, entries[g.name]) for g in pod_groups(draft.job["metadata"]["name"], spec)
    ]
    progress = _read_progress(draft, slots, progress_configmap)
    groups = _sort_pods(draft, spec, slots, progress, pods)
    errors = validate(spec)
    bad_script = script_error(spec, configmaps) or (
        check_existing_claim(spec, claim) if claim is not None else None
    )
    if not _stop_phase(draft, spec, groups, errors, bad_script):
        _run_groups(draft, spec, groups, nodes, last_seen, configmaps, bad_script)
    draft.put(st.GROUPS, [entries[s.group.name] for s in slots])
    return draft.decision


def _read_progress(
    draft: Draft, slots: list[Slot], progress_configmap: Obj | None
) -> dict[str, ProgressView]:
    """The oracle's record into status (trials, best trial), each trial group's into its
    entry, the job's progress and checkpoint times the latest of the groups'. Returns
    each group's own record, by group name."""
    trial_slots = [s for s in slots if not s.group.oracle]
    ignored: list[str] = []
    oracle_progress = copy_progress(draft, progress_configmap, slots[0].group.tuner_id)
    ignored.extend(oracle_progress.ignored)
    apply_progress(draft, oracle_progress)
    progress = {s.group.name: _group_progress(draft, progress_configmap, s, ignored) for s in slots}
    for slot in trial_slots:
        for key in REPORTED:
            value = progress[slot.group.name].values.get(key)
            if value is not None:
                slot.put(key, value)
    draft.decision.ignored = tuple(ignored)
    draft.decision.reset_progress = False
    groups_last = [s.get(st.LAST_PROGRESS_TIME) for s in trial_slots]
    for key, values in (
        (st.LAST_PROGRESS_TIME, [*groups_last, oracle_progress.text("lastProgressTime")]),
        (st.LAST_CHECKPOINT_TIME, [s.get(st.LAST_CHECKPOINT_TIME) for s in trial_slots]),
    ):
        latest = _latest(values)
        if latest is not None:
            draft.put(key, latest)
    return progress


def _sort_pods(
    draft: Draft,
    spec: JobSpec,
    slots: list[Slot],
    progress: dict[str, ProgressView],
    pods: list[Obj],
) -> _Groups:
    """The job's pods by group; pods of no current attempt deleted, and the Kueue pod
    groups the operator is done with released."""
    job = draft.job
    others = [p for p in pods if foreign(p, job)]
    pods = [p for p in pods if not foreign(p, job)]
    current = {s.group.name: current_pods(s, pods) for s in slots}
    alive_names = {n for group in current.values() for n in group}
    stale = [p for p in pods if p["metadata"]["name"] not in alive_names]
    delete_alive(draft, stale)
    stopping = draft.get(st.PHASE) in st.TERMINAL_PHASES or spec.suspend
    release_held(draft, pods, alive_names, stopping)
    every_current = [p for group in current.values() for p in group.values()]
    return _Groups(slots, progress, pods, others, current, stale, every_current)


def _stop_phase(
    draft: Draft,
    spec: JobSpec,
    groups: _Groups,
    errors: list[SpecError],
    bad_script: SpecError | None,
) -> bool:
    """A finished job stays finished (or reopens: its groups start afresh), an invalid
    spec fails the job, a suspended job stops every group. True: the decision is
    complete."""
    slots = groups.slots
    if draft.get(st.PHASE) in st.TERMINAL_PHASES:
        if reopen_or_stay(draft, spec, slots, groups.every_current, errors, bad_script):
            return True
        groups.current = {s.group.name: {} for s in slots}
    if errors:
        message = INVALID_SPEC_PREFIX + "; ".join(str(e) for e in errors)
        delete_alive(draft, groups.every_current)
        _close_all(draft, spec, slots, groups.current)
        finish(draft, succeeded=False, reason="InvalidSpec", message=message)
        return True
    if spec.suspend:
        _close_all(draft, spec, [s for s in slots if s.started], groups.current)
        suspend(draft, slots, groups.pods)
        for slot in slots:
            slot.put(st.GROUP_STATE, "Succeeded" if slot.get(st.GROUP_COMPLETED) else "Suspended")
        return True
    resume_if_suspended(draft)
    return False


def _run_groups(
    draft: Draft,
    spec: JobSpec,
    groups: _Groups,
    nodes: Mapping[str, Obj | None],
    last_seen: Mapping[str, Obj],
    configmaps: Mapping[str, Obj | None],
    bad_script: SpecError | None,
) -> None:
    """Start the groups that wait, follow the running ones, judge stalls, and report
    each group's state and the job's; the job succeeds once every trial group has
    completed."""
    results: dict[str, GroupResult] = {}
    if _start_groups(draft, spec, groups, configmaps, bad_script, results):
        return
    if _follow_groups(draft, spec, groups, nodes, last_seen, results):
        return
    if _judge_stalls(draft, spec, groups, results):
        return
    for slot in groups.slots:
        outcome = results.get(slot.group.name)
        if slot.get(st.GROUP_COMPLETED):
            slot.put(st.GROUP_STATE, "Succeeded")
        elif outcome is not None:
            slot.put(st.GROUP_STATE, STATE.get(outcome.kind, "Pending"))
            slot.put(st.MESSAGE, outcome.message or None)
    if all(s.get(st.GROUP_COMPLETED) for s in groups.trial_slots):
        delete_alive(draft, groups.every_current, keep_ended=True)
        message = f"search completed: {best_text(draft)}"
        finish(draft, succeeded=True, reason="Completed", message=message)
        ttl(draft, spec)
        return
    _summarize(draft, groups.slots, results)


def _start_groups(
    draft: Draft,
    spec: JobSpec,
    groups: _Groups,
    configmaps: Mapping[str, Obj | None],
    bad_script: SpecError | None,
    results: dict[str, GroupResult],
) -> bool:
    """Start each group that has not started nor completed, or say what it waits for
    (into `results`). True: the job failed (an invalid script or claim)."""
    to_start = [s for s in groups.slots if not s.started and not s.get(st.GROUP_COMPLETED)]
    if to_start and draft.refused is None and not draft.get(st.START_TIME):
        draft.put(st.START_TIME, st.rfc3339(draft.now))
    for slot in to_start:
        waiting = _start(
            draft, spec, slot, groups.stale, groups.others, bad_script, configmaps, groups.progress
        )
        if waiting is not None and waiting.kind == "invalid":
            delete_alive(draft, groups.every_current)
            finish(draft, succeeded=False, reason="InvalidSpec", message=waiting.message)
            return True
        results[slot.group.name] = waiting or GroupResult("pending", "PodsPending", "created")
    return False


def _follow_groups(
    draft: Draft,
    spec: JobSpec,
    groups: _Groups,
    nodes: Mapping[str, Obj | None],
    last_seen: Mapping[str, Obj],
    results: dict[str, GroupResult],
) -> bool:
    """Each started group that has not completed: what its pods say (into `results`);
    a completed t0 gives the final result. True: the job ended (a budget spent, an
    InvalidSpec)."""
    t0 = groups.trial_slots[0]
    for slot in groups.slots:
        if slot.group.name in results or slot.get(st.GROUP_COMPLETED):
            continue  # started in this pass, or done
        group_pods = groups.current[slot.group.name]
        outcomes = classify_group(slot, group_pods, nodes, last_seen)
        held = held_pods(slot, group_pods, last_seen)
        progress = groups.progress[slot.group.name]
        result = run_group(draft, spec, slot, group_pods, outcomes, progress, held)
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
            if slot is t0 and result.chief is not None:
                apply_final(draft, result.chief)  # t0 ran the post-search work
        results[slot.group.name] = result
    return False


def _judge_stalls(
    draft: Draft, spec: JobSpec, groups: _Groups, results: dict[str, GroupResult]
) -> bool:
    """Condition Queued, and the groups judged for Stalled (running trial groups against
    their progress, waiting groups against their start; not while Kueue holds them),
    with the stall policy for the group that just became Stalled. True: the job ended
    (stallPolicy Fail)."""
    candidates = []
    for slot in groups.slots:
        outcome = results.get(slot.group.name)
        if slot.get(st.GROUP_COMPLETED) or outcome is None:
            continue
        if outcome.kind == "running" and not slot.group.oracle:
            candidates.append(running_stuck(draft, spec, slot, slot.get(st.LAST_PROGRESS_TIME)))
        elif outcome.kind in ("pending", "terminating") and outcome.reason != QUEUED:
            candidates.append(waiting_stuck(draft, spec, slot, outcome))
        elif outcome.kind == "refused":
            candidates.append(refused_stuck(draft, spec, slot, outcome))
    queued = [
        f"{name}: {r.message}"
        for name, r in results.items()
        if r.reason == QUEUED and r.kind == "pending"
    ]
    queued_condition(draft, "; ".join(queued) if queued else None)
    stalled = judge_stall(draft, candidates)
    if stalled is None:
        return False
    acted = apply_stall_policy(draft, spec, stalled, groups.current[stalled.slot.group.name])
    if acted is not None and acted.kind == "ended":
        delete_alive(draft, groups.every_current)
        return True
    if acted is not None:
        results[stalled.slot.group.name] = acted
    return False


def _close_all(
    draft: Draft, spec: JobSpec, slots: list[Slot], current: Mapping[str, Mapping[str, Obj]]
) -> None:
    """The groups' pods are stopped by the operator (suspend, an invalid spec)."""
    for slot in slots:
        draft.ledger.close(current[slot.group.name].values(), gpus_per_pod(spec, slot))


def _start(
    draft: Draft,
    spec: JobSpec,
    slot: Slot,
    stale: list[Obj],
    others: list[Obj],
    bad_script: SpecError | None,
    configmaps: Mapping[str, Obj | None],
    progress: Mapping[str, ProgressView],
) -> GroupResult | None:
    """Create the group's pods, or say what it waits for (None: created)."""
    mine = [p for p in stale if p["metadata"]["name"] in slot.group.pod_names]
    if mine:
        return GroupResult("waiting", "OldPodsTerminating", f"{len(mine)} old pod(s) terminating")
    if others:
        return GroupResult(
            "waiting", "EarlierJobPods", f"{len(others)} pod(s) of an earlier TuningJob"
        )
    waiting = backoff_wait(draft, slot)
    if waiting is not None:
        return GroupResult("waiting", "Backoff", waiting)
    if bad_script is not None:
        return GroupResult("invalid", message=INVALID_SPEC_PREFIX + str(bad_script))
    if script_missing(spec, configmaps):
        wait_for_script(draft, spec)
        return GroupResult("waiting", "ScriptConfigMapMissing", "the script's ConfigMap")
    if draft.refused is not None:
        return hold_back(draft, slot, draft.refused)
    start_group(draft, slot)
    slot.put(st.RESTORE_BASELINE, progress[slot.group.name].count("restores") or 0)
    return None


def _kind(results: Mapping[str, GroupResult], slot: Slot) -> str:
    result = results.get(slot.group.name)
    return result.kind if result is not None else ""


def _summarize(draft: Draft, slots: list[Slot], results: Mapping[str, GroupResult]) -> None:
    """Phase, conditions and message of an unfinished parallel job."""
    trial_slots = [s for s in slots if not s.group.oracle]
    running = [
        s for s in trial_slots if results.get(s.group.name, GroupResult("")).kind == "running"
    ]
    parts = []
    for slot in slots:
        result = results.get(slot.group.name)
        state = (
            "done"
            if slot.get(st.GROUP_COMPLETED)
            else STATE.get(result.kind, "?")
            if result
            else "?"
        )
        what = slot.group.name
        if slot in running and slot.get(st.GROUP_TRIAL_ID):
            what += f" trial {slot.get(st.GROUP_TRIAL_ID)} step {slot.get(st.GROUP_STEP) or 0}"
        else:
            what += f" {state.lower()}"
            waits = ("pending", "waiting", "refused")
            if result is not None and result.kind in waits and result.message:
                what += f" ({result.message})"
        parts.append(what)
    summary = f"{draft.get(st.TRIALS)} trials done; " + ", ".join(parts)
    draft.put(st.MESSAGE, summary[:1024])
    trials = [str(s.get(st.GROUP_TRIAL_ID)) for s in running if s.get(st.GROUP_TRIAL_ID)]
    if trials:
        draft.put(st.CURRENT_TRIAL, ",".join(trials))
    if running:
        if draft.get(st.PHASE) != st.PHASE_RUNNING:
            draft.put(st.PHASE, st.PHASE_RUNNING)
        draft.cond(
            st.COND_RUNNING,
            True,
            "TrialsRunning",
            f"{len(running)}/{len(trial_slots)} trial groups running",
        )
        return
    first = next(
        (r for r in results.values() if r.kind not in ("running", "completed") and r.reason),
        None,
    )
    if first is not None:
        draft.cond(st.COND_RUNNING, False, first.reason, first.message)
