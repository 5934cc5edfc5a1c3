"""What the soak did and saw (pure data): a record per fault injected, the pod groups
each one disrupted, and the violations found. Thread-safe: faults run on threads of
their own, several at once."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from bench.chaos.schedule import SUSPEND_RESUME

Obj = dict[str, Any]

INJECTED = "injected"
SKIPPED = "skipped"
ERROR = "error"


@dataclasses.dataclass(frozen=True)
class Hit:
    """One pod group a fault disrupted: the job (namespace, uid), the group (its
    `tuneop.io/group` label, "trainer" for a job without trial groups) and its pod group
    index (`tuneop.io/attempt`). `clean`: the pod was running and nobody was deleting
    it, so the operator must count this disruption; otherwise (pending, already
    terminating, or the trainer finishing) it may or may not. `queue`: Kueue evicted the
    group (its pods marked TerminationTarget), which the operator also counts in
    `queueEvictions`."""

    namespace: str
    uid: str
    group: str
    attempt: str
    clean: bool
    queue: bool = False
    exit_seen: bool = False
    """Its trainer's exit code was seen (the fault followed the pod to its end)."""


@dataclasses.dataclass
class FaultRecord:
    """A fault as injected: its kind, slot and job, when (s since the soak's start),
    the outcome (injected, skipped with why, error with what) and the groups it hit."""

    kind: str
    slot: int
    planned_at: float
    job_kind: str = ""
    namespace: str = ""
    uid: str = ""
    started: float = 0.0
    ended: float = 0.0
    outcome: str = INJECTED
    detail: str = ""
    hits: list[Hit] = dataclasses.field(default_factory=list)
    recovery_seconds: float | None = None
    """From the fault to the hit job's next progress (its status moving again)."""
    steps_redone: int | None = None
    """Steps the hit job redid (matrix.steps_redone); None: not measurable."""

    def to_json(self) -> Obj:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Violation:
    """An invariant broken: which, by which job (namespace, uid; "" for the cluster),
    and what was seen."""

    invariant: str
    namespace: str
    uid: str
    detail: str
    job_kind: str = ""


class Ledger:
    """The soak's records and violations, appended from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.faults: list[FaultRecord] = []
        self.violations: list[Violation] = []
        self.suspensions: dict[tuple[str, str], int] = {}
        """(namespace, uid) → suspend-and-resume cycles applied to that job."""
        self._in_progress: list[FaultRecord] = []

    def begin(self, record: FaultRecord) -> None:
        """A fault begins: until add_fault, it may still record hits."""
        with self._lock:
            self._in_progress.append(record)

    def add_fault(self, record: FaultRecord) -> None:
        with self._lock:
            self.faults.append(record)
            self._in_progress = [r for r in self._in_progress if r is not record]

    def in_progress_since(self, when: float) -> bool:
        """Whether a fault that began at `when` (s since the start) or before is still
        in progress."""
        with self._lock:
            return any(r.started <= when for r in self._in_progress)

    def add_violations(self, violations: list[Violation]) -> None:
        with self._lock:
            self.violations.extend(violations)

    def suspended(self, namespace: str, uid: str) -> None:
        with self._lock:
            key = (namespace, uid)
            self.suspensions[key] = self.suspensions.get(key, 0) + 1

    def hits_of(self, namespace: str, uid: str) -> list[Hit]:
        """The job's hits. One whose fault overlapped a suspension of the job is not
        clean: the operator may rightly take the pod's end for the suspension's own."""
        with self._lock:
            job = (namespace, uid)
            suspended = [(f.started, f.ended) for f in self.faults
                         if f.kind == SUSPEND_RESUME and f.outcome == INJECTED
                         and (f.namespace, f.uid) == job]  # fmt: skip
            return [
                dataclasses.replace(h, clean=h.clean and not _overlaps(f, suspended))
                for f in self.faults
                for h in f.hits
                if h.namespace == namespace and h.uid == uid
            ]


DISRUPTED_SECONDS = 30.0
"""From a fault's start, how long its pods take to end (the soak's jobs have a 15-s
grace period); its record lasts longer (it follows them, holds a node)."""


def _overlaps(fault: FaultRecord, windows: list[tuple[float, float]]) -> bool:
    until = fault.started + DISRUPTED_SECONDS
    return any(start <= until and fault.started <= end for start, end in windows)
