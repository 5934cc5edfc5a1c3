"""Status helpers per the Kubernetes API conventions: conditions with
lastTransitionTime (changed only when `status` flips) and observedGeneration."""

from __future__ import annotations

import datetime as dt
from typing import Any

Obj = dict[str, Any]

PHASE_PENDING = "Pending"
PHASE_RUNNING = "Running"
PHASE_SUSPENDED = "Suspended"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
PHASES = (PHASE_PENDING, PHASE_RUNNING, PHASE_SUSPENDED, PHASE_SUCCEEDED, PHASE_FAILED)
TERMINAL_PHASES = (PHASE_SUCCEEDED, PHASE_FAILED)

COND_RUNNING = "Running"
COND_SUSPENDED = "Suspended"
COND_STALLED = "Stalled"
COND_COMPLETE = "Complete"
COND_FAILED = "Failed"
COND_QUEUED = "Queued"
"""True while Kueue has not admitted the job's pod group (reason Queued, Kueue's message)."""
CONDITION_TYPES = (
    COND_RUNNING,
    COND_QUEUED,
    COND_SUSPENDED,
    COND_STALLED,
    COND_COMPLETE,
    COND_FAILED,
)


def rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def get_condition(conditions: list[Obj], type_: str) -> Obj | None:
    for cond in conditions:
        if cond.get("type") == type_:
            return cond
    return None


def set_condition(
    conditions: list[Obj],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: dt.datetime,
) -> list[Obj]:
    """A new list with condition `type_` set; lastTransitionTime moves only when the
    status changes. Order: the fixed CONDITION_TYPES order, unknown types after."""
    value = "True" if status else "False"
    old = get_condition(conditions, type_)
    transition = (
        old["lastTransitionTime"]
        if old and old.get("status") == value and old.get("lastTransitionTime")
        else rfc3339(now)
    )
    new = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
        "observedGeneration": generation,
    }
    others = [c for c in conditions if c.get("type") != type_]
    merged = [*others, new]
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(merged, key=lambda c: order.get(str(c.get("type")), len(order)))


def condition_is(conditions: list[Obj], type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return bool(cond and cond.get("status") == "True")
