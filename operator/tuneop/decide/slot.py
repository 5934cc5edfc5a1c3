"""One pod group's bookkeeping (`Slot`) and what a pass concluded about the group
(`GroupResult`). A sequential job has one group whose bookkeeping is the top-level
status (`status.attempt`, ...); each group of a parallel job keeps its own in its
`status.groups` entry, which also holds per-group counters and what its trainer last
reported. Budgets and counters are the job's in both."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..api import status as st
from ..api.groups import PodGroup
from .classify import Classification, attempt_of
from .patch import Draft

Obj = dict[str, Any]

TOP_LEVEL = {
    st.ATTEMPT: st.ATTEMPT,
    st.GROUP_STARTED: st.ATTEMPT_STARTED,
    st.START_TIME: st.ATTEMPT_START_TIME,
    st.NEXT_RETRY_TIME: st.NEXT_RETRY_TIME,
    st.PODS_REFUSED: st.PODS_REFUSED,
    st.RESTORED_ATTEMPT: st.RESTORED_ATTEMPT,
    st.RESTORE_BASELINE: st.RESTORE_BASELINE,
    st.LAST_PROGRESS_TIME: st.LAST_PROGRESS_TIME,
    st.LAST_CHECKPOINT_TIME: st.LAST_CHECKPOINT_TIME,
}
"""Where the sequential group's bookkeeping lives in status, by the key a parallel
job's group uses for it inside its `status.groups` entry."""


def _declared(key: str) -> str:
    """`key` of a status.groups entry, which the CRD declares (st.GROUP_KEYS)."""
    if key not in st.GROUP_KEYS:
        raise KeyError(f"status.groups[].{key} is not declared in the TuningJob's status schema")
    return key


class Slot:
    """One pod group's bookkeeping: the top-level status fields of the sequential group,
    or (`entry`) the status.groups entry of a parallel job's group, which also keeps
    per-group counters and what its trainer last reported."""

    def __init__(self, draft: Draft, group: PodGroup, entry: Obj | None = None) -> None:
        self.draft = draft
        self.group = group
        self.entry = entry

    def get(self, key: str, default: Any = None) -> Any:
        if self.entry is None:
            return self.draft.get(TOP_LEVEL[key], default) if key in TOP_LEVEL else default
        return self.entry.get(key, default)

    def put(self, key: str, value: Any) -> None:
        if self.entry is None:
            if key in TOP_LEVEL:
                self.draft.put(TOP_LEVEL[key], value)
        elif value is None:
            self.entry.pop(key, None)
        else:
            self.entry[_declared(key)] = value

    def count(self, key: str) -> None:
        """A per-group counter (parallel jobs only; the job's own counts are `Draft.count`)."""
        if self.entry is not None:
            self.entry[_declared(key)] = st.int_of(self.entry.get(key)) + 1

    @property
    def attempt(self) -> int:
        return st.int_of(self.get(st.ATTEMPT))

    @property
    def started(self) -> bool:
        return bool(self.get(st.GROUP_STARTED))

    def current_pods(self, pods: list[Obj]) -> dict[str, Obj]:
        """The group's pods of its current attempt, by name."""
        attempt = str(self.attempt)
        return {
            p["metadata"]["name"]: p
            for p in pods
            if attempt_of(p) == attempt and p["metadata"]["name"] in self.group.pod_names
        }

    @property
    def gpus_per_pod(self) -> int:
        """The GPUs each of the group's pods holds (none for a parallel job's oracle)."""
        return self.draft.spec.distribution.gpus_per_worker if self.group.gpus else 0

    @property
    def label(self) -> str:
        """How Events and messages name the group."""
        if self.entry is None:
            return "trainer"
        return "oracle" if self.group.oracle else f"trial group {self.group.name}"

    def recreate(self) -> None:
        """The next pass creates a new pod group (index + 1)."""
        self.put(st.ATTEMPT, self.attempt + 1)
        self.put(st.GROUP_STARTED, False)

    def restart(self) -> None:
        """Recreate after the group ended on its own (disruption, failure, trial OOM,
        stall), counted in the job's and the group's `restarts`."""
        self.recreate()
        self.draft.count(st.RESTARTS)
        self.count(st.RESTARTS)


OLD_PODS_TERMINATING = "OldPodsTerminating"
"""A group to start waits for its older pods to go (they may still be checkpointing)."""


@dataclasses.dataclass
class GroupResult:
    kind: str
    """completed | invalid | recreate | ended | terminating | running | pending |
    waiting | refused (ended: a budget is spent and the job was finished Failed;
    refused: the API server refused to create the group, decide.refusal)."""
    reason: str = ""
    message: str = ""
    """For the Running condition (recreate, pending) or the job's failure (invalid)."""
    summary: str = ""
    """status.message of a sequential job."""
    chief: Classification | None = None
    since: str | None = None
    """terminating: from when (RFC 3339) the stall rules judge its wait (its pods' end
    due, a failure's), not from the group's start: a group that trained an hour is not
    stuck the moment a pod of it is deleted."""
    judged: bool = True
    """False: a wait bounded by its own deadline, which the stall rules leave alone."""


def last_checkpoint(draft: Draft, slot: Slot) -> Any:
    """The group's last checkpoint time, not before the group started (a group that
    never checkpointed loses everything since its start)."""
    reported = slot.get(st.LAST_CHECKPOINT_TIME)
    times = [t for t in (st.parse_time(reported), st.parse_time(slot.get(st.START_TIME))) if t]
    return st.rfc3339(max(times)) if times else None
