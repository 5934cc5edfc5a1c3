"""A pod group the API server will not let the operator create: its pods refused (a
ResourceQuota, Pod Security or another admission check: PodRejected) or a child's name
taken by an object the job does not own (ChildConflict). The executor meets the refusal
when it applies a pass's decision; the pass then decides again with it
(`Observed.refused`), and that decision holds back every group it would start and says why.
The groups created whole before the refused pod start; the refused one waits from its
first refusal (`podsRefused.since`) and is judged against pendingTimeoutSeconds like any
group that does not start, so spec.stallPolicy applies to it; the groups after it wait
too. A held group's pods already created are deleted (they would hold quota the rest
needs, unwatched). Every later pass tries to create the groups again."""

from __future__ import annotations

from ..api import status as st
from .observed import Refusal
from .patch import UNWATCHED_RECHECK_SECONDS, Draft
from .slot import GroupResult, Slot
from .stall import Stuck

POD_REJECTED = "PodRejected"
"""Reason while the API server refuses the job's pods, with the server's message."""
CHILD_CONFLICT = "ChildConflict"
"""Reason while a child's name is taken by an object the job does not own."""


def held_from(slots: list[Slot], refusal: Refusal | None) -> int | None:
    """The index of the first group a refusal holds back: the one with the refused pod
    (the groups before it were created whole), or for a refusal before any pod (a
    child) the first that was to start. None without a refusal."""
    if refusal is None:
        return None
    for index, slot in enumerate(slots):
        if refusal.pod is not None and refusal.pod in slot.group.pod_names:
            return index
    return next((i for i, s in enumerate(slots) if not s.started), 0)


def hold_back(draft: Draft, slot: Slot, refusal: Refusal) -> GroupResult:
    """The group is not started in this pass: since when it is refused is kept, and one
    Warning Event says so when its refusal begins or changes reason."""
    held = slot.get(st.PODS_REFUSED)
    held = held if isinstance(held, dict) else {}
    if held.get(st.REFUSED_REASON) != refusal.reason:
        since = held.get(st.REFUSED_SINCE) if st.parse_time(held.get(st.REFUSED_SINCE)) else None
        slot.put(
            st.PODS_REFUSED,
            {st.REFUSED_REASON: refusal.reason, st.REFUSED_SINCE: since or st.rfc3339(draft.now)},
        )
        draft.event("Warning", refusal.reason, refusal.message)
    draft.decision.wake_within(UNWATCHED_RECHECK_SECONDS)  # a quota freed sends no event
    return GroupResult(
        "refused",
        refusal.reason,
        refusal.message,
        f"cannot create the {slot.label} pod group: {refusal.message}",
    )


def refused_stuck(draft: Draft, slot: Slot, result: GroupResult) -> Stuck:
    """A refused group judged against pendingTimeoutSeconds since its first refusal."""
    spec = draft.spec
    held = slot.get(st.PODS_REFUSED)
    since = st.parse_time(held.get(st.REFUSED_SINCE)) if isinstance(held, dict) else None
    idle = (draft.now - since).total_seconds() if since else 0.0
    return Stuck(
        slot, idle, spec.pending_timeout_seconds, result.reason, result.message,
        "pendingTimeoutSeconds",
    )  # fmt: skip
