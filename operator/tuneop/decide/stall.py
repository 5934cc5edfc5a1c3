"""Stall: a pod group judged against its timeouts in every non-terminal state (a
running group against `stallTimeoutSeconds` since its last progress, a group not
started against `pendingTimeoutSeconds` since it was created, one not finished
terminating as long since its pods were due to be gone), condition Stalled with one
Warning Event per stall, and `spec.stallPolicy` (Ignore, Restart, Fail) for a group that
just became Stalled."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..api import status as st
from .job import finish, stop_group
from .patch import Draft
from .slot import GroupResult, Slot

Obj = dict[str, Any]


def idle_seconds(draft: Draft, last_progress: Any, started_at: Any) -> float | None:
    """Seconds since the later of the last progress and the group's start."""
    known = [t for t in (st.parse_time(last_progress), st.parse_time(started_at)) if t]
    return (draft.now - max(known)).total_seconds() if known else None


@dataclasses.dataclass(frozen=True)
class Stuck:
    """A pod group judged for Stalled: how long it has been idle or not started."""

    slot: Slot
    idle: float | None
    timeout: int
    reason: str
    detail: str = ""
    field: str = "stallTimeoutSeconds"


def running_stuck(draft: Draft, slot: Slot, last_progress: Any) -> Stuck:
    """A running group: idle since its last progress (or its start)."""
    spec = draft.spec
    idle = idle_seconds(draft, last_progress, slot.get(st.START_TIME))
    return Stuck(slot, idle, spec.stall_timeout_seconds, "NoProgress")


def waiting_stuck(draft: Draft, slot: Slot, result: GroupResult) -> Stuck:
    """A group whose pods have not started since it was created (or have not finished
    terminating since they were due to be gone, GroupResult.since): judged against
    pendingTimeoutSeconds, with the reason it waits."""
    spec = draft.spec
    idle = idle_seconds(draft, None, result.since or slot.get(st.START_TIME))
    return Stuck(
        slot, idle, spec.pending_timeout_seconds, result.reason, result.message,
        "pendingTimeoutSeconds",
    )  # fmt: skip


def judge_stall(draft: Draft, candidates: list[Stuck]) -> Stuck | None:
    """Condition Stalled from the groups over their timeout (the first one named; True
    with one Warning Event when it starts or its reason changes), False otherwise.
    Returns the group that became stalled in this pass, for the stall policy."""
    over = [c for c in candidates if c.idle is not None and c.idle > c.timeout]
    for waiting in candidates:
        if waiting.idle is not None and waiting.idle <= waiting.timeout:
            # the pass that finds it over: a second past its timeout (idle > timeout)
            draft.decision.wake_within(waiting.timeout - waiting.idle + 1)
    current = st.get_condition(draft.conditions, st.COND_STALLED) or {}
    if not over:
        if current.get("status") == "True" or not current:
            draft.cond(st.COND_STALLED, False, "Progressing", "")
        return None
    first = over[0]
    who = "" if first.slot.entry is None else f"{first.slot.label}: "
    what = "no progress" if first.reason == "NoProgress" else first.reason
    message = f"{who}{what} for {int(first.idle or 0)}s ({first.field}={first.timeout})"
    if first.detail:
        message += f": {first.detail}"
    if current.get("status") == "True" and current.get("reason") == first.reason:
        return None
    draft.cond(st.COND_STALLED, True, first.reason, message[:32768])
    draft.event("Warning", "Stalled", message)
    return first


STALL_RESTART = "StallRestart"


def apply_stall_policy(draft: Draft, stuck: Stuck, pods: Mapping[str, Obj]) -> GroupResult | None:
    """spec.stallPolicy for a group that just became Stalled: Restart recreates it
    (status.restarts and stallRestarts, never a failure or a preemption; a group the API
    server refuses is tried again every pass anyway), Fail ends the job with reason
    Stalled; Ignore leaves it to the condition and the alert."""
    spec = draft.spec
    slot = stuck.slot
    condition = st.get_condition(draft.conditions, st.COND_STALLED) or {}
    message = str(condition.get("message") or stuck.reason)
    if spec.stall_policy == "Fail":
        stop_group(draft, pods, slot.gpus_per_pod)
        finish(draft, succeeded=False, reason="Stalled", message=f"stalled: {message}")
        return GroupResult("ended")
    if spec.stall_policy != "Restart" or not slot.started:
        return None  # a group never created (refused) has nothing to recreate
    stop_group(draft, pods, slot.gpus_per_pod)
    draft.event(
        "Warning",
        STALL_RESTART,
        f"{slot.label} pod group {slot.attempt} stalled ({stuck.reason}); recreating it "
        "(stallPolicy Restart)",
    )
    slot.restart()
    draft.count(st.STALL_RESTARTS)
    return GroupResult(
        "recreate",
        STALL_RESTART,
        message,
        f"stalled ({stuck.reason}); recreating the {slot.label} pod group",
    )
