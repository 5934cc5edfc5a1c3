"""The decision for a job with parallel trials (`spec.parallelTrials > 1`), a pure
function like the sequential one (tuneop.reconcile), with the same rules applied to each
pod group on its own (tuneop.group_step).

The groups (tuneop.groups) are the oracle, which serves keras-tuner's oracle over gRPC,
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

from collections.abc import Mapping
from typing import Any

from . import names
from . import status as st
from .decision import (
    INVALID_SPEC_PREFIX,
    Builder,
    Decision,
    apply_final,
    apply_progress,
    best_text,
    copy_progress,
    delete_alive,
    finish,
    foreign,
    reopen_or_stay,
    resume_if_suspended,
    script_error,
    script_missing,
    suspend,
    ttl,
    wait_for_script,
)
from .group_step import (
    GroupResult,
    Slot,
    apply_stall_policy,
    backoff_wait,
    classify_group,
    current_pods,
    gpus_per_pod,
    held_pods,
    judge_stall,
    queued_condition,
    release_held,
    run_group,
    running_stuck,
    start_group,
    waiting_stuck,
)
from .groups import pod_groups
from .progress import ProgressView
from .progress import from_configmap as progress_from_configmap
from .queue import QUEUED
from .spec import JobSpec, check_existing_claim, validate

Obj = dict[str, Any]

REPORTED = ("trialId", "epoch", "step", "lastProgressTime", "lastCheckpointTime")
"""What a group entry shows of its trainer's last record."""

STATE = {
    "completed": "Succeeded",
    "recreate": "Restarting",
    "terminating": "Terminating",
    "running": "Running",
    "pending": "Pending",
    "waiting": "Waiting",
}


def _entries(b: Builder, spec: JobSpec) -> dict[str, Obj]:
    """Each group's status.groups entry (a copy to update), by name; new groups start
    empty. Entries of anything else than a dict are dropped (status is writable)."""
    old = {e.get("name"): dict(e) for e in b.get("groups") or [] if isinstance(e, dict)}
    return {
        g.name: old.get(g.name) or {"name": g.name, "attempt": 0}
        for g in pod_groups(b.job["metadata"]["name"], spec)
    }


def _group_progress(
    b: Builder, configmap: Obj | None, slot: Slot, ignored: list[str]
) -> ProgressView:
    """The group's own record, if its current pod group wrote it (an older trainer's
    record stays until the new one reports: it must not count as a restore)."""
    name = names.progress_configmap_name(b.job["metadata"]["name"])
    view = progress_from_configmap(configmap, name, slot.group.tuner_id)
    if view is None:
        return ProgressView({})
    ignored.extend(view.ignored)
    reported = st.parse_time(view.text("lastProgressTime"))
    started = st.parse_time(slot.get("startTime"))
    if reported is not None and started is not None and reported < started:
        return ProgressView({})
    return view


def _latest(values: list[Any]) -> str | None:
    times = [(st.parse_time(v), v) for v in values]
    known = [(t, v) for t, v in times if t is not None]
    return max(known)[1] if known else None


def decide_parallel(
    b: Builder,
    spec: JobSpec,
    pods: list[Obj],
    *,
    nodes: Mapping[str, Obj | None],
    last_seen: Mapping[str, Obj],
    configmaps: Mapping[str, Obj | None],
    progress_configmap: Obj | None,
    claim: Obj | None = None,
) -> Decision:
    job = b.job
    name = job["metadata"]["name"]
    entries = _entries(b, spec)
    slots = [Slot(b, g, entries[g.name]) for g in pod_groups(name, spec)]
    trial_slots = [s for s in slots if not s.group.oracle]
    t0 = trial_slots[0]
    ignored: list[str] = []
    oracle_progress = copy_progress(b, progress_configmap, slots[0].group.tuner_id)
    ignored.extend(oracle_progress.ignored)
    apply_progress(b, oracle_progress)
    progress = {s.group.name: _group_progress(b, progress_configmap, s, ignored) for s in slots}
    for slot in trial_slots:
        for key in REPORTED:
            value = progress[slot.group.name].values.get(key)
            if value is not None:
                slot.put(key, value)
    b.decision.ignored = tuple(ignored)
    b.decision.reset_progress = False
    groups_last = [s.get("lastProgressTime") for s in trial_slots]
    for key, values in (
        ("lastProgressTime", [*groups_last, oracle_progress.text("lastProgressTime")]),
        ("lastCheckpointTime", [s.get("lastCheckpointTime") for s in trial_slots]),
    ):
        latest = _latest(values)
        if latest is not None:
            b.put(key, latest)

    others = [p for p in pods if foreign(p, job)]
    pods = [p for p in pods if not foreign(p, job)]
    current = {s.group.name: current_pods(s, pods) for s in slots}
    alive_names = {n for group in current.values() for n in group}
    stale = [p for p in pods if p["metadata"]["name"] not in alive_names]
    delete_alive(b, stale)
    stopping = b.get("phase") in st.TERMINAL_PHASES or spec.suspend
    release_held(b, pods, alive_names, stopping)
    every_current = [p for group in current.values() for p in group.values()]
    errors = validate(spec)
    bad_script = script_error(spec, configmaps) or (
        check_existing_claim(spec, claim) if claim is not None else None
    )

    def done() -> Decision:
        b.put("groups", [entries[s.group.name] for s in slots])
        return b.decision

    if b.get("phase") in st.TERMINAL_PHASES:
        if reopen_or_stay(b, spec, slots, every_current, errors, bad_script):
            return done()
        current = {s.group.name: {} for s in slots}
    if errors:
        message = INVALID_SPEC_PREFIX + "; ".join(str(e) for e in errors)
        delete_alive(b, every_current)
        _close_all(b, spec, slots, current)
        finish(b, succeeded=False, reason="InvalidSpec", message=message)
        return done()
    if spec.suspend:
        _close_all(b, spec, [s for s in slots if s.started], current)
        suspend(b, slots, pods)
        for slot in slots:
            slot.put("state", "Succeeded" if slot.get("completed") else "Suspended")
        return done()
    resume_if_suspended(b)

    results: dict[str, GroupResult] = {}
    to_start = [s for s in slots if not s.started and not s.get("completed")]
    if to_start and not b.get("startTime"):
        b.put("startTime", st.rfc3339(b.now))
    for slot in to_start:
        waiting = _start(b, spec, slot, stale, others, bad_script, configmaps, progress)
        if waiting is not None and waiting.kind == "invalid":
            delete_alive(b, every_current)
            finish(b, succeeded=False, reason="InvalidSpec", message=waiting.message)
            return done()
        results[slot.group.name] = waiting or GroupResult("pending", "PodsPending", "created")

    for slot in slots:
        if slot in to_start or slot.get("completed"):
            continue
        group_pods = current[slot.group.name]
        outcomes = classify_group(slot, group_pods, nodes, last_seen)
        held = held_pods(slot, group_pods, last_seen)
        result = run_group(b, spec, slot, group_pods, outcomes, progress[slot.group.name], held)
        if result.kind == "ended":  # a budget is spent: the job failed
            delete_alive(b, every_current)
            return done()
        if result.kind == "invalid":
            delete_alive(b, every_current)
            finish(b, succeeded=False, reason="InvalidSpec", message=result.message)
            return done()
        if result.kind == "completed":
            slot.put("completed", True)
            delete_alive(b, list(group_pods.values()), keep_ended=True)
            if slot is t0 and result.chief is not None:
                apply_final(b, result.chief)  # t0 ran the post-search work
        results[slot.group.name] = result

    candidates = []
    for slot in slots:
        outcome = results.get(slot.group.name)
        if slot.get("completed") or outcome is None:
            continue
        if outcome.kind == "running" and not slot.group.oracle:
            candidates.append(running_stuck(b, spec, slot, slot.get("lastProgressTime")))
        elif outcome.kind in ("pending", "terminating") and outcome.reason != QUEUED:
            candidates.append(waiting_stuck(b, spec, slot, outcome))
    queued = [
        f"{name}: {r.message}"
        for name, r in results.items()
        if r.reason == QUEUED and r.kind == "pending"
    ]
    queued_condition(b, "; ".join(queued) if queued else None)
    stalled = judge_stall(b, candidates)
    if stalled is not None:
        acted = apply_stall_policy(b, spec, stalled, current[stalled.slot.group.name])
        if acted is not None and acted.kind == "ended":
            delete_alive(b, every_current)
            return done()
        if acted is not None:
            results[stalled.slot.group.name] = acted

    for slot in slots:
        outcome = results.get(slot.group.name)
        if slot.get("completed"):
            slot.put("state", "Succeeded")
        elif outcome is not None:
            slot.put("state", STATE.get(outcome.kind, "Pending"))
            slot.put("message", outcome.message or None)

    if all(s.get("completed") for s in trial_slots):
        delete_alive(b, every_current, keep_ended=True)
        finish(b, succeeded=True, reason="Completed", message=f"search completed: {best_text(b)}")
        ttl(b, spec)
        return done()

    _summarize(b, slots, results)
    return done()


def _close_all(
    b: Builder, spec: JobSpec, slots: list[Slot], current: Mapping[str, Mapping[str, Obj]]
) -> None:
    """The groups' pods are stopped by the operator (suspend, an invalid spec)."""
    for slot in slots:
        b.ledger.close(current[slot.group.name].values(), gpus_per_pod(spec, slot))


def _start(
    b: Builder,
    spec: JobSpec,
    slot: Slot,
    stale: list[Obj],
    others: list[Obj],
    bad_script: Any,
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
    waiting = backoff_wait(b, slot)
    if waiting is not None:
        return GroupResult("waiting", "Backoff", waiting)
    if bad_script is not None:
        return GroupResult("invalid", message=INVALID_SPEC_PREFIX + str(bad_script))
    if script_missing(spec, configmaps):
        wait_for_script(b, spec)
        return GroupResult("waiting", "ScriptConfigMapMissing", "the script's ConfigMap")
    start_group(b, slot)
    slot.put("restoreBaseline", progress[slot.group.name].count("restores") or 0)
    return None


def _kind(results: Mapping[str, GroupResult], slot: Slot) -> str:
    result = results.get(slot.group.name)
    return result.kind if result is not None else ""


def _summarize(b: Builder, slots: list[Slot], results: Mapping[str, GroupResult]) -> None:
    """Phase, conditions and message of an unfinished parallel job."""
    trial_slots = [s for s in slots if not s.group.oracle]
    running = [
        s for s in trial_slots if results.get(s.group.name, GroupResult("")).kind == "running"
    ]
    parts = []
    for slot in slots:
        result = results.get(slot.group.name)
        state = "done" if slot.get("completed") else STATE.get(result.kind, "?") if result else "?"
        what = slot.group.name
        if slot in running and slot.get("trialId"):
            what += f" trial {slot.get('trialId')} step {slot.get('step') or 0}"
        else:
            what += f" {state.lower()}"
            if result is not None and result.kind in ("pending", "waiting") and result.message:
                what += f" ({result.message})"
        parts.append(what)
    summary = f"{b.get('trials')} trials done; " + ", ".join(parts)
    b.put("message", summary[:1024])
    trials = [str(s.get("trialId")) for s in running if s.get("trialId")]
    if trials:
        b.put("currentTrial", ",".join(trials))
    if running:
        if b.get("phase") != st.PHASE_RUNNING:
            b.put("phase", st.PHASE_RUNNING)
        b.cond(
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
        b.cond(st.COND_RUNNING, False, first.reason, first.message)
