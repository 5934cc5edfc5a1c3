"""A stand-in trainer (TEST INFRASTRUCTURE, not product): speaks the trainer's side of
the progress contract without TensorFlow, for operator tests and benchmarks where the
search itself does not matter.

The node agent runs it in place of `python -m tuneop_trainer` for a job whose spec.env
is `env(...)` (podspec.MODULE_ENV names this module). Like the real trainer it
reports through tuneop_trainer.report.progress.Reporter (progress.json on the volume, the
job's progress ConfigMap, /progress), resumes from results.json on the volume (a
restore), exits 75 on SIGTERM or when the volume refuses a write (full, as the real
trainer's checkpoint/volume.py) and, after its last trial, writes results.json and the
final summary in its termination message and exits 0. A "trial" is a sleep; trial i
scores i / trials, so the last trial is the best.

Env: STANDIN_TRIALS (default 2), STANDIN_TRIAL_SECONDS (default 1.0),
STANDIN_STEP_SECONDS (default 0: no steps; else a training step reported that often
within a trial, as a steady real trainer does); TUNEOP_ names are the operator's.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tuneop_contract import (
    DEFAULT_CHECKPOINT_DIR,
    EXIT_COMPLETED,
    EXIT_PREEMPTED,
    PHASE_COMPLETED,
    PHASE_PREEMPTED,
    PHASE_RUNNING,
    RESULTS_FILE,
    VOLUME_ERROR_PREFIX,
    FinalSummary,
    now_rfc3339,
    write_atomic,
    write_termination_message,
)
from tuneop_trainer.checkpoint.volume import VOLUME_ERRNOS
from tuneop_trainer.report.progress import Reporter

from tests.localcluster.nodeagent.podspec import MODULE_ENV

MODULE = "tests.localcluster.standin_trainer"
ENV_TRIALS = "STANDIN_TRIALS"
ENV_TRIAL_SECONDS = "STANDIN_TRIAL_SECONDS"
ENV_STEP_SECONDS = "STANDIN_STEP_SECONDS"


def env(trials: int, seconds: float, step_seconds: float = 0.0) -> list[dict[str, str]]:
    """A TuningJob's spec.env that runs this stand-in: `trials` trials of `seconds`,
    a step every `step_seconds` (0: none)."""
    return [
        {"name": MODULE_ENV, "value": MODULE},
        {"name": ENV_TRIALS, "value": str(trials)},
        {"name": ENV_TRIAL_SECONDS, "value": str(seconds)},
        {"name": ENV_STEP_SECONDS, "value": str(step_seconds)},
    ]


def trial_id(index: int) -> str:
    return f"{index:04d}"


def results(done: int, total: int) -> dict[str, Any]:
    """results.json after `done` trials (the shape the real trainer writes)."""
    trials = [
        {"trialId": trial_id(i), "status": "COMPLETED", "score": i / total, "hyperparameters": {}}
        for i in range(done)
    ]
    best = max(trials, key=lambda t: float(t["score"]), default=None)
    return {
        "objective": {"name": "score", "direction": "max"},
        "trials": trials,
        "best": None
        if best is None
        else {k: best[k] for k in ("trialId", "score", "hyperparameters")},
    }


def _train(reporter: Reporter, stop: threading.Event, seconds: float, step: float) -> bool:
    """One trial's `seconds`, reporting a step every `step` seconds (0: none); True if
    stopped (SIGTERM)."""
    if step <= 0:
        return stop.wait(seconds)
    end, steps = time.monotonic() + seconds, 0
    while (left := end - time.monotonic()) > 0:
        if stop.wait(min(step, left)):
            return True
        steps += 1
        reporter.step(0, steps)
    return False


def run(directory: Path, total: int, seconds: float, step_seconds: float = 0.0) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    reporter = Reporter(directory, min_interval=0.0)
    reporter.serve()
    previous = reporter.previous()
    path = directory / RESULTS_FILE
    done = len(json.loads(path.read_text())["trials"]) if path.exists() else 0
    restores = (previous.restores if previous else 0) + (1 if done else 0)
    reporter.update(
        force=True,
        phase=PHASE_RUNNING,
        trials_total=total,
        trials_completed=done,
        restores=restores,
        objective="score",
        direction="max",
        resumed_from_epoch=0 if done else None,
        resumed_from_step=0 if done else None,
    )
    while done < total:
        reporter.update(trial_id=trial_id(done), last_progress_time=now_rfc3339())
        if _train(reporter, stop, seconds, step_seconds):
            reporter.update(force=True, phase=PHASE_PREEMPTED, message="preempted; resume me")
            reporter.close()
            return EXIT_PREEMPTED
        done += 1
        try:
            write_atomic(path, json.dumps(results(done, total)).encode())
        except OSError as exc:
            if exc.errno not in VOLUME_ERRNOS:
                raise
            return _volume_failed(reporter, path, exc)
        best = results(done, total)["best"]
        reporter.update(
            force=True,
            trials_completed=done,
            best_trial_id=best["trialId"],
            best_score=best["score"],
            best_hyperparameters={},
            last_progress_time=now_rfc3339(),
        )
    best = results(done, total)["best"]
    summary = FinalSummary(done, total, best["trialId"], best["score"], {})
    write_termination_message(summary.to_message())
    reporter.update(force=True, phase=PHASE_COMPLETED, trial_id=None, message="search completed")
    reporter.close()
    return EXIT_COMPLETED


def _volume_failed(reporter: Reporter, path: Path, exc: OSError) -> int:
    """The volume refused a write: report it and exit 75; the trials before stay."""
    message = f"{VOLUME_ERROR_PREFIX} {os.strerror(exc.errno or 0)} writing {path}"
    write_termination_message(message)
    reporter.update(force=True, phase=PHASE_PREEMPTED, message=message)
    reporter.close()
    return EXIT_PREEMPTED


def main() -> int:
    total = int(os.environ.get(ENV_TRIALS, "2"))
    seconds = float(os.environ.get(ENV_TRIAL_SECONDS, "1.0"))
    step_seconds = float(os.environ.get(ENV_STEP_SECONDS, "0"))
    directory = Path(os.environ.get("TUNEOP_CHECKPOINT_DIR", DEFAULT_CHECKPOINT_DIR))
    return run(directory, total, seconds, step_seconds)


if __name__ == "__main__":
    sys.exit(main())
