"""Trials an earlier pod group could not finish, recorded FAILED before the search goes on.

The operator names them in TUNEOP_FAILED_TRIALS (`<trialId>:<reason>,...`), today the
trials whose trainer was OOMKilled: their hyperparameters need more memory than the pod
has. keras-tuner 1.4.8 by itself would retry them: `Oracle.reload` puts every trial that
was RUNNING at the kill on `_retry_queue`, and `create_trial` pops that queue before it
makes a new trial, so the same hyperparameters would run out of memory again and again.

For each named trial the reloaded oracle still has RUNNING or queued for retry, this
takes it off the queue, sets `status = "FAILED"` with a message and calls
`oracle.end_trial(trial)`: keras-tuner's own way to end a trial for good (FAILED is never
retried), which appends it to `end_order` and writes the trial and the oracle (through
patches/keras_tuner_files.py, atomically; only the chief writes, every worker changes
its oracle alike).
Ids the oracle does not have, or has ended already, are ignored, so a second start with
the same variable changes nothing.

keras-tuner's `max_consecutive_failed_trials` still holds: the check runs after the
state is written, so a search whose last N trials all failed stops with keras-tuner's
own error, the same on every restart."""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Mapping
from typing import Any

from tuneop_contract import ENV_FAILED_TRIALS, FAILED_REASON_OOM, parse_failed_trials

log = logging.getLogger(__name__)

MESSAGES = {FAILED_REASON_OOM: "out of memory in a previous attempt (OOMKilled)"}


def message(reason: str) -> str:
    """The FAILED trial's message for a reason of TUNEOP_FAILED_TRIALS."""
    return MESSAGES.get(reason, f"failed in a previous attempt ({reason})")


def apply(oracle: Any, environ: Mapping[str, str] | None = None) -> list[str]:
    """Mark the trials named in TUNEOP_FAILED_TRIALS FAILED in `oracle` (a reloaded
    keras-tuner 1.4.8 Oracle); returns the ids it marked now."""
    environ = os.environ if environ is None else environ
    failed = parse_failed_trials(environ.get(ENV_FAILED_TRIALS))
    marked: list[str] = []
    for trial_id, reason in failed.items():
        trial = oracle.trials.get(trial_id)
        if trial is None:
            log.info(
                "%s: trial %s is not a trial of this search; ignored", ENV_FAILED_TRIALS, trial_id
            )
            continue
        queue = getattr(oracle, "_retry_queue", [])
        ongoing = [k for k, t in oracle.ongoing_trials.items() if t.trial_id == trial_id]
        if trial.status != "RUNNING" and trial_id not in queue and not ongoing:
            log.debug("trial %s already ended (%s)", trial_id, trial.status)
            continue
        while trial_id in queue:
            queue.remove(trial_id)
        for key in ongoing:
            oracle.ongoing_trials.pop(key)
        _known_to_display(oracle, trial_id)
        trial.status = "FAILED"
        trial.message = message(reason)
        limit = getattr(oracle, "max_consecutive_failed_trials", None)
        oracle.max_consecutive_failed_trials = None  # checked below, once the state is saved
        try:
            oracle.end_trial(trial)
        finally:
            oracle.max_consecutive_failed_trials = limit
        log.warning("trial %s recorded FAILED: %s; not retried", trial_id, trial.message)
        marked.append(trial_id)
    if marked and hasattr(oracle, "_check_consecutive_failures"):
        oracle._check_consecutive_failures()
    return marked


def _known_to_display(oracle: Any, trial_id: str) -> None:
    """keras-tuner's Display prints a trial's end from the starts it recorded; a trial
    begun before a state it lost would be a KeyError, and a search run with
    `verbose=0` recorded no search start (a TypeError once this process prints)."""
    display = getattr(oracle, "_display", None)
    if display is None:
        return
    if getattr(display, "search_start", "") is None:
        display.search_start = dt.datetime.now()
    display.trial_start.setdefault(trial_id, dt.datetime.now())
    display.trial_number.setdefault(trial_id, len(display.trial_number) + 1)
