"""What `tuneop` prints about a TuningJob: the one-line progress of --follow and
`status`, the table of `list`, the summary of the best trials. Pure: status in, text out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TERMINAL = ("Succeeded", "Failed")


def progress_line(job: dict[str, Any]) -> str:
    """`Running  trial 0002 (1/3 done)  epoch 1 step 7  best 0.9219  preemptions 1
    restores 1  goodput 97.5%` from the job's status."""
    status = job.get("status") or {}
    progress = status.get("progress") or {}
    phase = str(status.get("phase") or "Pending")
    parts = [phase]
    if phase not in TERMINAL and (status.get("currentTrial") or progress.get("trialId")):
        trial = status.get("currentTrial") or progress.get("trialId")
        parts.append(f"trial {trial} ({status.get('trials') or '?'} done)")
    elif status.get("trials"):
        parts.append(f"trials {status['trials']}")
    if progress.get("epoch") is not None and phase == "Running":
        parts.append(f"epoch {progress.get('epoch')} step {progress.get('step', 0)}")
    best = (status.get("bestTrial") or {}).get("score")
    if isinstance(best, int | float):
        parts.append(f"best {best:.4g}")
    for key in ("preemptions", "restores"):
        if status.get(key):
            parts.append(f"{key} {status[key]}")
    goodput = (status.get("goodput") or {}).get("percent")
    if isinstance(goodput, int | float):
        parts.append(f"goodput {goodput:.1f}%")
    message = status.get("message")
    if phase in TERMINAL and message:
        parts.append(f"- {message}")
    return "  ".join(parts)


def summary(job: dict[str, Any]) -> str:
    """The best trials, best first, with their hyperparameters."""
    status = job.get("status") or {}
    top = status.get("topTrials") or ([status["bestTrial"]] if status.get("bestTrial") else [])
    if not top:
        return "no completed trial"
    rows = [("trial", "score", "hyperparameters")]
    for trial in top:
        score = trial.get("score")
        shown = f"{score:.6g}" if isinstance(score, int | float) else "-"
        hps = ", ".join(f"{k}={v}" for k, v in (trial.get("hyperparameters") or {}).items())
        rows.append((str(trial.get("id", "?")), shown, hps))
    return table(rows)


def jobs_table(jobs: list[dict[str, Any]]) -> str:
    rows = [("NAME", "STATE", "TRIALS", "BEST", "PREEMPTIONS")]
    for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        status = job.get("status") or {}
        best = (status.get("bestTrial") or {}).get("score")
        rows.append((
            job["metadata"]["name"], str(status.get("phase") or "Pending"),
            str(status.get("trials") or "-"),
            f"{best:.4g}" if isinstance(best, int | float) else "-",
            str(status.get("preemptions") or 0),
        ))  # fmt: skip
    return table(rows)


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)
