"""The chaos soak's fault schedule (pure): which fault, when, on which job slot, for how
long, drawn from a seed so a run can be repeated.

Faults come in bursts: each burst starts one to `max_overlap` faults within a few
seconds of each other, so several are in force at once; faults that fight over the
same thing never overlap (a single exclusive group each: the nodes' capacity, the API
server, the operator replicas, Kueue's manager, the ClusterQueue's quota). Every fault
ends before the soak's fault window does (`duration - tail`), and there are at most
`max_faults` of them."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

POD_SIGKILL = "pod-sigkill"
POD_SIGTERM = "pod-sigterm"
POD_EVICT = "pod-evict"
SCHEDULER_PREEMPT = "scheduler-preempt"
NODE_CRASH = "node-crash"
NODE_DRAIN = "node-drain"
APISERVER_RESTART = "apiserver-restart"
ETCD_RESTART = "etcd-restart"
OPERATOR_KILL = "operator-kill"
PROGRESS_CONFIGMAP_DELETE = "progress-configmap-delete"
SUSPEND_RESUME = "suspend-resume"
JOB_RECREATE = "job-recreate"
KUEUE_PREEMPT = "kueue-preempt"
KUEUE_CONTROLLER_RESTART = "kueue-controller-restart"
QUOTA_SHRINK = "quota-shrink"
CLAIM_FULL = "claim-full"

FAULT_KINDS: tuple[str, ...] = (
    POD_SIGKILL,
    POD_SIGTERM,
    POD_EVICT,
    SCHEDULER_PREEMPT,
    NODE_CRASH,
    NODE_DRAIN,
    APISERVER_RESTART,
    ETCD_RESTART,
    OPERATOR_KILL,
    PROGRESS_CONFIGMAP_DELETE,
    SUSPEND_RESUME,
    JOB_RECREATE,
    KUEUE_PREEMPT,
    KUEUE_CONTROLLER_RESTART,
    QUOTA_SHRINK,
    CLAIM_FULL,
)
"""The fault kinds the soak injects (the Kueue ones record themselves skipped when the
soak runs without Kueue or their slot's job is not queued)."""

CLUSTER_WIDE: tuple[str, ...] = (
    APISERVER_RESTART,
    ETCD_RESTART,
    OPERATOR_KILL,
    KUEUE_CONTROLLER_RESTART,
)
"""Kinds that act on every job at once, not on their slot's: the fault matrix counts
them against every job (`*`)."""

NOT_BUILT: tuple[str, ...] = ("pod-network-cut",)
"""Fault kinds the soak does not inject yet."""

HOLD_SECONDS: dict[str, tuple[float, float]] = {
    POD_SIGKILL: (0.0, 0.0),
    POD_SIGTERM: (0.0, 0.0),
    POD_EVICT: (0.0, 0.0),
    SCHEDULER_PREEMPT: (10.0, 25.0),
    NODE_CRASH: (45.0, 60.0),  # past the taint manager's eviction (20 s + 10 s here)
    NODE_DRAIN: (10.0, 30.0),
    APISERVER_RESTART: (2.0, 8.0),
    ETCD_RESTART: (2.0, 6.0),  # under the controllers' 10-s lease renew deadline
    OPERATOR_KILL: (0.0, 0.0),
    PROGRESS_CONFIGMAP_DELETE: (0.0, 0.0),
    SUSPEND_RESUME: (5.0, 20.0),
    JOB_RECREATE: (0.0, 0.0),
    KUEUE_PREEMPT: (10.0, 25.0),
    KUEUE_CONTROLLER_RESTART: (2.0, 10.0),
    QUOTA_SHRINK: (10.0, 40.0),
    CLAIM_FULL: (5.0, 20.0),
}
"""How long each kind lasts (uniform in the range): the outage, the cordon, the
suspension, the preemptor's hold (once Kueue admitted it), the quota shrunk, the claim
kept full. Instant
kinds last 0 s (their effect takes its own time)."""

EXCLUSIVE: dict[str, str] = {
    SCHEDULER_PREEMPT: "capacity",
    NODE_CRASH: "capacity",
    NODE_DRAIN: "capacity",
    APISERVER_RESTART: "apiserver",
    ETCD_RESTART: "apiserver",
    OPERATOR_KILL: "operator",
    KUEUE_CONTROLLER_RESTART: "kueue",
    KUEUE_PREEMPT: "quota",
    QUOTA_SHRINK: "quota",
}
"""Kinds of one group never overlap: one node's capacity taken at a time (else nothing
may fit), one API server outage, one replica killed (the other must take over first),
one Kueue manager restart, one change to the ClusterQueue's quota (a preemptor sized to
the quota left free would size itself against a shrunk one)."""

SETTLE_SECONDS: dict[str, float] = {
    OPERATOR_KILL: 90.0,
    APISERVER_RESTART: 20.0,
    ETCD_RESTART: 20.0,
    KUEUE_CONTROLLER_RESTART: 30.0,
    KUEUE_PREEMPT: 20.0,
}
"""Extra gap after a kind before the next of its group: the standby's take-over (the
peering lifetime), the controllers' re-lists (the API server's, Kueue's manager's), the
victims of a Kueue preemption re-admitted."""


@dataclasses.dataclass(frozen=True)
class Planned:
    """One fault to inject: `kind` at `at` s after the soak's start on job slot
    `slot`, lasting `hold` s."""

    at: float
    kind: str
    slot: int
    hold: float

    @property
    def end(self) -> float:
        return self.at + self.hold


@dataclasses.dataclass(frozen=True)
class Limits:
    """The schedule's bounds."""

    duration: float
    slots: int
    warmup: float = 45.0
    tail: float = 60.0
    max_faults: int = 400
    max_overlap: int = 3
    burst_gap: tuple[float, float] = (15.0, 45.0)
    burst_spread: float = 5.0


def plan(seed: int, limits: Limits, kinds: Sequence[str] = FAULT_KINDS) -> list[Planned]:
    """The seeded schedule, by start time."""
    rng = random.Random(seed)
    window_end = limits.duration - limits.tail
    busy: dict[str, float] = {}
    out: list[Planned] = []
    start = limits.warmup
    first = True
    while start < window_end and len(out) < limits.max_faults:
        size = rng.randint(2 if first else 1, max(2, limits.max_overlap))
        first = False
        for _ in range(size):
            fault = _draw(rng, start, limits, kinds, busy)
            if fault is not None and fault.end <= window_end and len(out) < limits.max_faults:
                out.append(fault)
                group = EXCLUSIVE.get(fault.kind)
                if group:
                    busy[group] = fault.end + SETTLE_SECONDS.get(fault.kind, 5.0)
        start += rng.uniform(*limits.burst_gap)
    return sorted(out, key=lambda f: (f.at, f.kind, f.slot))


def _draw(
    rng: random.Random, start: float, limits: Limits, kinds: Sequence[str], busy: dict[str, float]
) -> Planned | None:
    """One fault of the burst starting at `start`, or None if its group is busy then."""
    kind = rng.choice(list(kinds))
    at = round(start + rng.uniform(0, limits.burst_spread), 2)
    low, high = HOLD_SECONDS[kind]
    hold = round(rng.uniform(low, high), 2)
    slot = rng.randrange(limits.slots)
    group = EXCLUSIVE.get(kind)
    if group and busy.get(group, 0.0) > at:
        return None
    return Planned(at, kind, slot, hold)


def overlapping(faults: Sequence[Planned], slack: float = 10.0) -> int:
    """How many faults start while another is still in force (or within `slack` s of
    an instant one: its effect, a recovery, takes that long)."""
    count = 0
    for i, fault in enumerate(faults):
        if any(other.at <= fault.at <= max(other.end, other.at + slack) for other in faults[:i]):
            count += 1
    return count
