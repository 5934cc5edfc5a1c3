"""The fault matrix (pure): fault kind x job kind -> injected, skipped, errors,
survived, recovery seconds (p50, max), steps redone (p50, max), violations; and its
printed table.

Steps redone (`steps_redone`): the position the job's status last reported before the
fault (its current trial, epoch and step) less the position its trainer restored after
it, when that restore (`restores` went up) was of the same trial and epoch; None
otherwise (a new trial, another epoch, no restore seen). The trainer reports its
position every few seconds, so this is a lower bound: the steps it ran after its last
report and before the fault are not seen.

A fault "survived" when the job it targeted (for kube-apiserver and operator faults,
every job: they act on all) ended with no violation; a violation counts against every
fault kind that hit its job."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.chaos.ledger import ERROR, INJECTED, SKIPPED, FaultRecord, Violation

Obj = dict[str, Any]
ALL_JOBS = "*"


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def steps_redone(before: Obj, after: Obj) -> int | None:
    """Steps redone between the statuses `before` a fault and `after` the recovery."""
    was, now = before.get("progress") or {}, after.get("progress") or {}
    if (
        before.get("currentTrial") is None
        or before.get("currentTrial") != after.get("currentTrial")
        or int(now.get("restores") or 0) <= int(was.get("restores") or 0)
        or now.get("resumedFromEpoch") != was.get("epoch")
    ):
        return None
    step, resumed = was.get("step"), now.get("resumedFromStep")
    if not isinstance(step, int) or not isinstance(resumed, int):
        return None
    return max(0, step - resumed)


def _violated(record: FaultRecord, bad_jobs: set[tuple[str, str]], any_bad: bool) -> bool:
    if record.job_kind == ALL_JOBS:
        return any_bad
    targets = {(record.namespace, record.uid)} | {(h.namespace, h.uid) for h in record.hits}
    return bool(targets & bad_jobs)


def build(faults: Sequence[FaultRecord], violations: Sequence[Violation]) -> list[Obj]:
    """One row per (fault kind, job kind) seen."""
    bad_jobs = {(v.namespace, v.uid) for v in violations if v.uid}
    any_bad = bool(violations)
    rows: dict[tuple[str, str], Obj] = {}
    for record in faults:
        row = rows.setdefault((record.kind, record.job_kind), {
            "fault": record.kind, "job": record.job_kind, "injected": 0, "skipped": 0,
            "errors": 0, "survived": 0, "violations": 0, "_recovery": [], "_redone": [],
        })  # fmt: skip
        if record.outcome == SKIPPED:
            row["skipped"] += 1
            continue
        if record.outcome == ERROR:
            row["errors"] += 1
            continue
        assert record.outcome == INJECTED
        row["injected"] += 1
        if _violated(record, bad_jobs, any_bad):
            row["violations"] += 1
        else:
            row["survived"] += 1
        if record.recovery_seconds is not None:
            row["_recovery"].append(record.recovery_seconds)
        if record.steps_redone is not None:
            row["_redone"].append(record.steps_redone)
    out = []
    for key in sorted(rows):
        row = rows[key]
        recovery = row.pop("_recovery")
        row["recovery_p50"] = percentile(recovery, 0.5) if recovery else None
        row["recovery_max"] = max(recovery) if recovery else None
        redone = row.pop("_redone")
        row["redone_p50"] = percentile(redone, 0.5) if redone else None
        row["redone_max"] = max(redone) if redone else None
        out.append(row)
    return out


def table(rows: Sequence[Obj]) -> str:
    """The matrix as text, one line per row."""
    head = ("fault", "job", "injected", "survived", "skipped", "errors", "rec p50", "rec max",
            "redone p50", "redone max", "violations")  # fmt: skip
    lines = [f"{head[0]:26}{head[1]:12}" + "".join(f"{h:>11}" for h in head[2:])]
    for row in rows:
        cells = [row["injected"], row["survived"], row["skipped"], row["errors"],
                 _s(row["recovery_p50"]), _s(row["recovery_max"]), _n(row.get("redone_p50")),
                 _n(row.get("redone_max")), row["violations"]]  # fmt: skip
        lines.append(f"{row['fault']:26}{row['job']:12}" + "".join(f"{c!s:>11}" for c in cells))
    return "\n".join(lines)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
