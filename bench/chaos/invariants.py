"""The soak's invariants as pure checks: each takes what was read (a status, results.json,
the hits recorded, samples over time) and returns the violations found (empty: held).

What each fault kind adds to a job's counters (from decide/classify.py and the e2e
tests' assertions): a trainer pod deleted with or without a grace period, evicted,
preempted by the scheduler, evicted by the taint manager after its node crashed, or
evicted by a drain is a disruption: one `preemptions` (and one `restarts`) per pod
group disrupted, however many of its pods or faults hit it, never a `failures`. A
kube-apiserver or etcd restart, an operator replica killed, the progress ConfigMap deleted and
a suspension add nothing (the operator's own deletion on suspend is no disruption). A
claim made full adds one `preemptions` per pod group whose trainer exited 75 for it
(CheckpointVolumeError: recreated after a backoff). A
job re-created under its name is a new job (a new uid): its counters start at zero.
A disruption that lands on a pod not running or already terminating, on a trainer that
ends its search under the signal (exit 0, or no pod group after it), or while its job
is being suspended may be counted or not: the expectation is a range, [clean hits, all
hits], over distinct pod groups.

A pod group Kueue evicted (a kueue-preempt's victims) is a disruption like the others,
counted once in `preemptions` and once in `restarts`, and also in `queueEvictions`
(decide/budgets.py, count_preemption: `preemptions` always, `queueEvictions` when a pod
of the group reads EvictedByKueue, then _recreate_preempted → Slot.restart in
decide/slot.py counts `restarts`; tests/e2e/test_queue.py asserts preemptions 1 and
queueEvictions 1 after one eviction). So `restarts` = `preemptions` + `failures` +
`stallRestarts` holds with Kueue too, and `queueEvictions` <= `preemptions`. Kueue's
manager restarted and the ClusterQueue's quota shrunk and restored add nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from bench.chaos.jobkinds import Known
from bench.chaos.ledger import Hit, Violation

Obj = dict[str, Any]

MONOTONE_COUNTERS = (
    "trialsCompleted", "preemptions", "failures", "restarts", "restores", "queueEvictions",
)  # fmt: skip
ZERO_COUNTERS = ("failures", "trialOOMs", "stallRestarts")
"""No soak fault is a trainer failure, a trial out of memory or a stall."""


@dataclasses.dataclass(frozen=True)
class JobRef:
    """Which job a check is about: namespace, uid, kind."""

    namespace: str
    uid: str
    kind: str

    def violation(self, invariant: str, detail: str) -> Violation:
        return Violation(invariant, self.namespace, self.uid, detail, self.kind)


def expected_preemptions(hits: Iterable[Hit]) -> tuple[int, int]:
    """[low, high] preemptions for the pod groups `hits` disrupted: distinct groups hit
    cleanly, distinct groups hit at all."""
    every = {(h.group, h.attempt) for h in hits}
    clean = {(h.group, h.attempt) for h in hits if h.clean}
    return len(clean), len(every)


def expected_queue_evictions(hits: Iterable[Hit]) -> tuple[int, int]:
    """[low, high] queueEvictions: distinct pod groups Kueue evicted at all, and those it
    evicted cleanly that no other fault hit. A group is counted once, under whichever of
    its disruptions the operator saw first, and only a Kueue one adds a queueEviction
    (Kueue leaves alone a pod someone else is deleting: Pod.Stop in its pod controller)."""
    hits = list(hits)
    every = {(h.group, h.attempt) for h in hits if h.queue}
    other = {(h.group, h.attempt) for h in hits if not h.queue}
    clean = {(h.group, h.attempt) for h in hits if h.queue and h.clean} - other
    return len(clean), len(every)


def settled(hits: Iterable[Hit], status: Obj) -> list[Hit]:
    """`hits` as the job's end shows them: a hit on the pod group that ended the job (no
    group came after it), whose trainer's exit code was not seen (a SIGKILL leaves none),
    disrupted a trainer that ended its search all the same, so it was finishing, and
    whether it counts is a race. A hit whose exit code was seen is judged by it."""
    last = {str(g.get("name")): str(g.get("attempt")) for g in status.get("groups") or []}
    last["trainer"] = str(status.get("attempt"))
    if status.get("phase") != "Succeeded":
        return list(hits)
    return [
        dataclasses.replace(h, clean=h.clean and (h.exit_seen or last.get(h.group) != h.attempt))
        for h in hits
    ]


def check_phase(job: JobRef, status: Obj, budget: int, low: int) -> list[Violation]:
    """Succeeded, unless the clean disruptions alone spent the preemption budget (then
    Failed, reason PreemptionBudgetExceeded)."""
    phase = status.get("phase")
    if low > budget:
        reason = _failed_reason(status)
        if phase == "Failed" and reason == "PreemptionBudgetExceeded":
            return []
        return [job.violation("honest-phase", f"{phase} ({reason}); budget {budget} < {low}")]
    if phase != "Succeeded":
        why = _failed_reason(status) or status.get("message", "")
        return [job.violation("honest-phase", f"ended {phase}: {why}")]
    return []


def _failed_reason(status: Obj) -> str:
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return str(cond.get("reason") or "")
    return ""


def check_counters(
    job: JobRef, status: Obj, hits: Sequence[Hit], suspensions: int, adopted: bool
) -> list[Violation]:
    """The status counters against the faults injected into the job."""
    out = []
    low, high = expected_preemptions(hits)
    got = int(status.get("preemptions") or 0)
    if not low <= got <= high:
        out.append(job.violation("preemptions", f"{got}, expected {low}..{high}"))
    out += _check_queue_evictions(job, status, hits, got)
    for key in ZERO_COUNTERS:
        if int(status.get(key) or 0) != 0:
            out.append(job.violation(key, f"{status.get(key)}, expected 0"))
    restarts = int(status.get("restarts") or 0)
    if restarts != got + int(status.get("failures") or 0) + int(status.get("stallRestarts") or 0):
        out.append(job.violation("restarts", f"{restarts} != preemptions + failures + stalls"))
    restores = int(status.get("restores") or 0)
    # an elastic job's change of shape starts a new pod group (status.attempt) that
    # restores, and is no restart
    groups = max(restarts, int(status.get("attempt") or 0))
    if restores > groups + suspensions + int(adopted):
        out.append(job.violation(
            "restores", f"{restores} > pod groups after the first {groups} + suspensions "
            f"{suspensions} + adopted {int(adopted)}",
        ))  # fmt: skip
    return out


def _check_queue_evictions(
    job: JobRef, status: Obj, hits: Sequence[Hit], preemptions: int
) -> list[Violation]:
    """queueEvictions in its range, and never more than the preemptions (each of them
    is one)."""
    low, high = expected_queue_evictions(hits)
    got = int(status.get("queueEvictions") or 0)
    out = []
    if not low <= got <= high:
        out.append(job.violation("queueEvictions", f"{got}, expected {low}..{high}"))
    if got > preemptions:
        out.append(job.violation("queueEvictions", f"{got} > preemptions {preemptions}"))
    return out


def check_trials(
    job: JobRef, status: Obj, results: Obj | None, known: Known | None
) -> list[Violation]:
    """results.json lists every trial exactly once, as many as the status says were
    planned and done; a kind with a known result ends with it."""
    if results is None:
        return [job.violation("trials-once", "no results.json on the claim")]
    ids = [str(t.get("trialId")) for t in results.get("trials") or []]
    out = []
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        out.append(job.violation("trials-once", f"trial ids listed twice: {duplicated}"))
    total, done = status.get("trialsTotal"), status.get("trialsCompleted")
    if not (len(ids) == done == total):
        out.append(job.violation("trials-once", f"{len(ids)} in results, {done}/{total} in status"))
    if known is not None:
        out += _check_known(job, status, ids, known)
    return out


def _check_known(job: JobRef, status: Obj, ids: list[str], known: Known) -> list[Violation]:
    best = status.get("bestTrial") or {}
    out = []
    if len(set(ids)) != known.trials:
        out.append(job.violation("known-result", f"{len(set(ids))} trials, known {known.trials}"))
    if (
        best.get("id") != known.best_trial
        or abs(float(best.get("score") or -1) - known.best_score) > 1e-9
    ):
        out.append(job.violation(
            "known-result", f"best {best.get('id')} {best.get('score')}, "
            f"known {known.best_trial} {known.best_score}",
        ))  # fmt: skip
    return out


class StatusHistory:
    """One job's status samples over the run (per uid): counters and trials completed
    never go down, the best score never gets worse."""

    def __init__(self, job: JobRef, direction: str = "max") -> None:
        self.job = job
        self.sign = 1.0 if direction == "max" else -1.0
        self.last: dict[str, float] = {}
        self.best: float | None = None
        self.samples = 0

    def observe(self, status: Obj) -> list[Violation]:
        self.samples += 1
        out = []
        for key in MONOTONE_COUNTERS:
            if key not in status:
                continue
            value = float(status[key] or 0)
            if value < self.last.get(key, value):
                seen = f"phase {status.get('phase')}: {status.get('message', '')}"[:160]
                out.append(
                    self.job.violation("monotone", f"{key} {self.last[key]} -> {value} ({seen})")
                )
            self.last[key] = max(value, self.last.get(key, value))
        score = (status.get("bestTrial") or {}).get("score")
        if isinstance(score, int | float):
            if self.best is not None and self.sign * score < self.sign * self.best:
                out.append(self.job.violation("monotone", f"best score {self.best} -> {score}"))
            if self.best is None or self.sign * score > self.sign * self.best:
                self.best = float(score)
        return out


def check_memory(samples: Sequence[float], limit_mib: float, name: str) -> list[Violation]:
    """An operator replica's RSS samples (MiB) stay under `limit_mib`, and the last
    third's peak is at most 1.5 x the first third's plus 64 MiB (no steady growth)."""
    if not samples:
        return []
    out = []
    if max(samples) >= limit_mib:
        out.append(Violation("memory", "", "", f"{name} RSS {max(samples)} MiB >= {limit_mib}"))
    third = max(1, len(samples) // 3)
    early, late = max(samples[:third]), max(samples[-third:])
    if len(samples) >= 6 and late > 1.5 * early + 64:
        out.append(Violation("memory", "", "", f"{name} RSS grew {early} -> {late} MiB"))
    return out


def check_leftovers(namespace: str, names: Sequence[str]) -> list[Violation]:
    """Nothing of a deleted job's is left in its namespace (`names`: what a listing of
    pods, probes and Workloads found)."""
    if not names:
        return []
    return [Violation("leftovers", namespace, "", f"left behind: {sorted(names)}")]
