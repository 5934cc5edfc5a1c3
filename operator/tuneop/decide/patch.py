"""What a reconcile pass decides (`Decision`: the status patch, the objects to create,
already rendered, and the other actions the executor carries out), the typed status
patch (`StatusPatch`) and the draft the decision is drawn up in (`Draft`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, NamedTuple

from tuneop_contract.spec import JobSpec

from ..api import status as st
from ..api.events import Event
from .goodput import Ledger
from .observed import Observed

Obj = dict[str, Any]


class PodRef(NamedTuple):
    """A pod to delete: that very object (uid), not a successor under its name."""

    name: str
    uid: str | None


class Child(NamedTuple):
    """A child a pod group needs (claim, ConfigMaps, ServiceAccount, Role, ...), as
    rendered: created if absent; with `refresh` (a field, "data" say), replaced where
    that field of the one that exists differs (decide.desired.REFRESHED)."""

    obj: Obj
    refresh: str | None


UNWATCHED_RECHECK_SECONDS = 10.0
"""How soon a job waiting on what no watch reports looks again: the user's script
ConfigMap (missing, or found invalid by the operator), a quota that refused its pods,
Kueue's message for its queued pods."""


@dataclasses.dataclass
class Decision:
    status: Obj = dataclasses.field(default_factory=dict)
    """Merge patch for .status (only what changed; keys of st.KEYS only)."""
    events: list[Event] = dataclasses.field(default_factory=list)
    ensure_children: bool = False
    create_pods: list[int] = dataclasses.field(default_factory=list)
    """Worker indexes of the sequential group to create (pod group `create_attempt`)."""
    create_attempt: int = 0
    create_groups: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    """Parallel jobs: (group name, its pod group index) of each group to create whole."""
    create_probes: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    """Probe pods to create (decide.elastic): (worker index of the own shape, "") or
    (names.beside(running pod's worker index), that pod's node)."""
    reset_progress: bool = True
    """With ensure_children: empty the progress ConfigMap for the new pod group. Not for
    a parallel job's group, whose siblings keep reporting there under their own keys."""
    children: list[Child] = dataclasses.field(default_factory=list)
    """What ensure_children creates, rendered, in creation order (decide.desired)."""
    pods: list[Obj] = dataclasses.field(default_factory=list)
    """The trainer pods of create_pods and create_groups, rendered, in creation order."""
    probes: list[Obj] = dataclasses.field(default_factory=list)
    """The probe pods of create_probes, rendered (a refused one does not fail the pass)."""
    delete_pods: list[PodRef] = dataclasses.field(default_factory=list)
    release_pods: list[PodRef] = dataclasses.field(default_factory=list)
    """Pods whose Kueue pod group is over (annotated retriable-in-group=false first)."""
    delete_job: bool = False
    requeue_after: float | None = None
    """Seconds until the earliest deadline a rule of this job waits for (a stall or
    pending timeout, a failure backoff, an elastic wait, the goodput refresh, the TTL):
    the next pass runs then unless an event comes first (None: no deadline)."""
    finished: bool = False
    """The job is done and stays so until its spec changes (or TTL, or a pod event):
    no need to reconcile it every few seconds."""
    ignored: tuple[str, ...] = ()
    """Fields of status.progress dropped as invalid (the executor logs them)."""
    recoveries: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    """(disruption reason, seconds from the loss to the next training step) measured in
    this pass, for the operator's recovery-time histogram."""

    def wake_within(self, seconds: float) -> None:
        """A rule's deadline: the next pass runs at the latest `seconds` from now."""
        seconds = max(0.0, float(seconds))
        held = self.requeue_after
        self.requeue_after = seconds if held is None else min(held, seconds)

    @property
    def writes_children(self) -> bool:
        """Whether applying it creates, deletes or releases pods or children: objects
        the watches deliver only later (run.watched reads them live next pass)."""
        return bool(
            self.ensure_children
            or self.create_pods
            or self.create_groups
            or self.create_probes
            or self.delete_pods
            or self.release_pods
            or self.delete_job
        )

    def merged_status(self, job: Obj) -> Obj:
        """The job's status after this decision's patch (for metrics, logs and the
        pods it creates)."""
        merged = dict(job.get("status") or {})
        for key, value in self.status.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return merged


class StatusPatch:
    """The merge patch of .status one pass writes (`body`): only the keys the CRD
    declares (st.KEYS; any other is a bug, refused at once), only what changed; its
    reads (`get`) see its earlier writes (`put`, `count`, `cond`)."""

    def __init__(self, old: Obj, generation: int, now: dt.datetime, body: Obj) -> None:
        self.old = old
        self.generation = generation
        self.now = now
        self.body = body
        self.conditions: list[Obj] = list(old.get(st.CONDITIONS) or [])

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.body:
            return self.body[key]
        return self.old.get(key, default)

    def put(self, key: str, value: Any) -> None:
        if self.old.get(key) != value or key in self.body:
            self.write(key, value)

    def write(self, key: str, value: Any) -> None:
        """`key` into the patch whether or not it changed (a whole record replaced)."""
        if key not in st.KEYS:
            raise KeyError(f"status.{key} is not declared in the TuningJob's status schema")
        self.body[key] = value

    def cond(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        self.conditions = st.set_condition(
            self.conditions, type_, status, reason, message, self.generation, self.now
        )
        if self.conditions != (self.old.get(st.CONDITIONS) or []):
            self.write(st.CONDITIONS, self.conditions)

    def count(self, key: str) -> int:
        value = st.int_of(self.get(key)) + 1
        self.put(key, value)
        return value


class Draft(StatusPatch):
    """One pass's decision as it is drawn up from what the pass read (`seen`, never
    changed): the status patch, the Events and actions (`decision`), and the goodput
    ledger of the GPU time the pass closes, opens and sees held."""

    def __init__(self, seen: Observed) -> None:
        self.seen = seen
        self.decision = Decision()
        generation = st.int_of(seen.job["metadata"].get("generation")) or 1
        super().__init__(seen.status, generation, seen.now, self.decision.status)
        self.ledger = Ledger(self.get(st.GOODPUT), seen.now)

    @property
    def spec(self) -> JobSpec:
        """The job's spec as this pass parsed it (at the shape in use)."""
        return self.seen.spec

    def event(self, type_: str, reason: str, message: str) -> None:
        self.decision.events.append(Event(type_, reason, message))
