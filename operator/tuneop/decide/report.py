"""What an unfinished job shows after a pass: its phase, condition Running and message,
drawn from what each pod group's pass concluded (a `GroupResult` by group name). A
sequential job's one group speaks for the job; a job with parallel trials shows each
group's state in its `status.groups` entry and a summary of all of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api import status as st
from .job import script_missing
from .job_groups import JobGroups
from .patch import Draft
from .slot import GroupResult, Slot

Obj = dict[str, Any]

STATE = {
    "completed": "Succeeded",
    "recreate": "Restarting",
    "terminating": "Terminating",
    "running": "Running",
    "started": "Pending",
    "pending": "Pending",
    "waiting": "Waiting",
    "refused": "Pending",
}
"""A parallel group's `state` by the kind of its pass's result."""

WAITING = ("started", "pending", "waiting", "refused")
"""Results of a group that does not train yet, with what it waits for."""
NOT_FOLLOWED = ("started", "waiting", "refused")
"""Results of a group whose pods the pass did not read (it was to start)."""


def record_states(groups: JobGroups, results: Mapping[str, GroupResult]) -> None:
    """Each parallel group's state and message in its `status.groups` entry."""
    if not groups.parallel:
        return
    for slot in groups.slots:
        outcome = results.get(slot.group.name)
        if slot.get(st.GROUP_COMPLETED):
            slot.put(st.GROUP_STATE, "Succeeded")
        elif outcome is not None:
            slot.put(st.GROUP_STATE, STATE.get(outcome.kind, "Pending"))
            slot.put(st.MESSAGE, outcome.message or None)


def report(
    draft: Draft,
    groups: JobGroups,
    results: Mapping[str, GroupResult],
) -> None:
    """Phase, condition Running and message of a job that goes on (a parallel job's
    group states are recorded first, `record_states`)."""
    if not groups.parallel:
        slot = groups.slots[0]
        _report_one(draft, slot, results[slot.group.name])
        return
    _summarize(draft, groups.slots, results)


def _report_one(
    draft: Draft,
    slot: Slot,
    result: GroupResult,
) -> None:
    """A sequential job: its one group's result is the job's."""
    spec = draft.spec
    if result.kind != "running" and draft.get(st.PHASE) == st.PHASE_RUNNING:
        draft.put(st.PHASE, st.PHASE_PENDING)  # no trainer trains while the group is replaced
    if result.kind in ("started", "waiting"):
        if result.summary:  # the script's ConfigMap wait has said it already
            draft.put(st.MESSAGE, result.summary)
        if result.reason == "Backoff":
            draft.cond(st.COND_RUNNING, False, result.reason, result.message)
    elif result.kind in ("recreate", "terminating", "refused"):
        draft.put(st.MESSAGE, result.summary)
        draft.cond(st.COND_RUNNING, False, result.reason, result.message)
    elif result.kind == "running":
        if draft.get(st.PHASE) != st.PHASE_RUNNING:
            draft.put(st.PHASE, st.PHASE_RUNNING)
        workers = len(slot.group.pod_names)
        draft.cond(st.COND_RUNNING, True, "TrainerRunning", f"{workers} trainer pod(s) running")
        trial = draft.get(st.CURRENT_TRIAL)
        trials = draft.get(st.TRIALS)
        draft.put(
            st.MESSAGE,
            f"running trial {trial}, {trials} trials done" if trial else "trainer running",
        )
    elif result.kind == "pending":
        pending = result.message
        if script_missing(draft.seen):
            # deleted after the check: the kubelet retries the mount until it is back
            pending += (
                f"; ConfigMap {spec.script_configmap!r} (spec.script.configMap.name) not "
                "found: the pods start once it exists"
            )
        draft.cond(st.COND_RUNNING, False, result.reason, pending)
        draft.put(st.MESSAGE, f"waiting for trainer pods ({pending})")


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
            if result is not None and result.kind in WAITING and result.message:
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
    if draft.get(st.PHASE) == st.PHASE_RUNNING:
        draft.put(st.PHASE, st.PHASE_PENDING)  # no trial group trains
    first = next(
        (r for r in results.values() if r.kind not in ("running", "completed") and r.reason),
        None,
    )
    if first is not None:
        draft.cond(st.COND_RUNNING, False, first.reason, first.message)
