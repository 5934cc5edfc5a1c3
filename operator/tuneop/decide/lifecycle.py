"""A job's phase before its groups run: a finished job stays finished or reopens (its
groups start afresh), an invalid spec fails it, a suspended job stops every group
gracefully, a resumed one goes on."""

from __future__ import annotations

from typing import Any

from tuneop_contract.spec import SpecError

from ..api import status as st
from .job import INVALID_SPEC_PREFIX, ScriptCheck, delete_alive, finish, ttl
from .job_groups import JobGroups
from .patch import UNWATCHED_RECHECK_SECONDS, Draft
from .slot import Slot

Obj = dict[str, Any]


def stop_phase(
    draft: Draft,
    groups: JobGroups,
    errors: list[SpecError],
    bad_script: ScriptCheck,
) -> bool:
    """A finished job stays finished (or reopens: its groups start afresh), an invalid
    spec fails the job, a suspended job stops every group. True: the decision is
    complete."""
    spec = draft.spec
    slots = groups.slots
    if draft.get(st.PHASE) in st.TERMINAL_PHASES:
        if reopen_or_stay(draft, slots, groups.every_current, errors, bad_script):
            return True
        groups.current = {s.group.name: {} for s in slots}
    if errors:
        message = INVALID_SPEC_PREFIX + "; ".join(str(e) for e in errors)
        delete_alive(draft, groups.every_current)
        _close(draft, slots, groups)
        finish(draft, succeeded=False, reason="InvalidSpec", message=message)
        return True
    if spec.suspend:
        _close(draft, [s for s in slots if s.started], groups)
        suspend(draft, slots, groups.pods)
        for slot in slots:
            slot.put(st.GROUP_STATE, "Succeeded" if slot.get(st.GROUP_COMPLETED) else "Suspended")
        return True
    resume_if_suspended(draft)
    return False


def _close(draft: Draft, slots: list[Slot], groups: JobGroups) -> None:
    """The groups' pods are stopped by the operator (suspend, an invalid spec): their
    GPU time ends."""
    for slot in slots:
        draft.ledger.close(groups.current[slot.group.name].values(), slot.gpus_per_pod)


def reopen_or_stay(
    draft: Draft,
    slots: list[Slot],
    current: list[Obj],
    errors: list[SpecError],
    script_err: ScriptCheck,
) -> bool:
    """A finished job stays finished (True: the decision is complete) unless it failed
    with an InvalidSpec that is fixed now: then it reopens (phase Pending), every
    started pod group is replaced, and the caller goes on (False). `slots`: the job's
    group slots (decide.slot.Slot)."""
    phase = draft.get(st.PHASE)
    failed = st.get_condition(draft.conditions, st.COND_FAILED) or {}
    # A spec edit may fix what the trainer rejected; what the operator rejected is
    # re-checked every pass (a fixed ConfigMap changes no generation).
    operator_rejected = failed.get("reason") == "InvalidSpec" and str(
        failed.get("message", "")
    ).startswith(INVALID_SPEC_PREFIX)
    reopen = (
        phase == st.PHASE_FAILED
        and failed.get("reason") == "InvalidSpec"
        and (failed.get("observedGeneration") != draft.generation or operator_rejected)
        and not errors
        and script_err() is None
    )
    if not reopen:
        draft.decision.finished = not operator_rejected
        if operator_rejected:
            draft.decision.wake_within(UNWATCHED_RECHECK_SECONDS)
        delete_alive(draft, current, keep_ended=phase != st.PHASE_FAILED)
        ttl(draft)
        return True
    draft.put(st.PHASE, st.PHASE_PENDING)
    draft.put(st.COMPLETION_TIME, None)
    draft.cond(st.COND_FAILED, False, "SpecChanged", "the spec changed; trying again")
    draft.event("Normal", "SpecChanged", "the spec is valid now; starting the trainer again")
    for slot in slots:
        slot.put(st.GROUP_COMPLETED, None)
        slot.put(st.PODS_REFUSED, None)
        if slot.started:
            slot.recreate()
    delete_alive(draft, current)
    return False


def suspend(draft: Draft, slots: list[Slot], pods: list[Obj]) -> None:
    """spec.suspend: every pod stops gracefully (they checkpoint), the volume stays;
    each started group gets a new pod group index, so resuming creates fresh pods."""
    if draft.get(st.PHASE) != st.PHASE_SUSPENDED:
        draft.put(st.PHASE, st.PHASE_SUSPENDED)
        draft.cond(st.COND_SUSPENDED, True, "Suspended", "spec.suspend is true")
        draft.cond(st.COND_RUNNING, False, "Suspended", "")
        draft.cond(st.COND_STALLED, False, "Suspended", "")
        draft.event(
            "Normal",
            "Suspended",
            "stopping the trainer pods gracefully (they checkpoint); the volume is kept",
        )
        for slot in slots:
            slot.put(st.PODS_REFUSED, None)
            if slot.started:
                slot.recreate()
    delete_alive(draft, pods)
    draft.put(st.MESSAGE, "suspended" if not pods else f"suspending: {len(pods)} pod(s) stopping")


def resume_if_suspended(draft: Draft) -> None:
    if draft.get(st.PHASE) == st.PHASE_SUSPENDED:
        draft.put(st.PHASE, st.PHASE_PENDING)
        draft.cond(st.COND_SUSPENDED, False, "Resumed", "spec.suspend is false")
        draft.event("Normal", "Resumed", "resuming the search from the checkpoint volume")
