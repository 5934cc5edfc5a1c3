"""The trainer's progress record as the operator reads it. The trainer reports it to the
job's progress ConfigMap (`<job>-progress`, the only object its token may write); the
operator reads that map each pass, keeps each field only if it has the type and bounds
the CRD declares for `status.progress.<field>`, and copies the result into the
TuningJob's status. A value of the wrong type or out of range is dropped and named,
never an exception that would stop the job's reconciliation on every pass, and never a
value that would make the API server reject the operator's own status patch."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

import tuneop_contract as contract

from . import status as st

Obj = dict[str, Any]

MAX_TEXT = 256
MAX_MESSAGE = 32768
MAX_HYPERPARAMETERS_BYTES = 16384
"""bestHyperparameters larger than this (as JSON) are dropped: the TuningJob is no
place for a forged or runaway blob."""


@dataclasses.dataclass(frozen=True)
class ProgressView:
    """The valid fields of a progress record; absent = missing or invalid."""

    values: Obj
    ignored: tuple[str, ...] = ()
    """`<source>.<field>` of each value dropped, for the log."""

    def count(self, key: str) -> int | None:
        value = self.values.get(key)
        return value if isinstance(value, int) else None

    def text(self, key: str) -> str | None:
        value = self.values.get(key)
        return value if isinstance(value, str) else None

    @property
    def empty(self) -> bool:
        return not self.values


def _integer(high: int, low: int = 0) -> Callable[[Any], int | None]:
    def check(value: Any) -> int | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return value if isinstance(value, int) and low <= value <= high else None

    return check


def _text(limit: int, *, empty: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            return None
        text = str(value)
        return text if (empty or text) and len(text) <= limit else None

    return check


def _enum(allowed: tuple[str, ...]) -> Callable[[Any], str | None]:
    return lambda value: value if isinstance(value, str) and value in allowed else None


def _score(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _seconds(high: float) -> Callable[[Any], float | None]:
    def check(value: Any) -> float | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if math.isfinite(value) and 0 <= value <= high else None

    return check


def _time(value: Any) -> str | None:
    return value if st.parse_time(value) is not None else None


def _hyperparameters(value: Any) -> Obj | None:
    if not isinstance(value, dict):
        return None
    try:
        size = len(json.dumps(value, allow_nan=False).encode())
    except (TypeError, ValueError):
        return None
    return value if size <= MAX_HYPERPARAMETERS_BYTES else None


def _top_trials(value: Any) -> list[Obj] | None:
    """At most TOP_TRIALS entries, each with a trial id, a finite score and its
    hyperparameters; one bad entry drops the whole list (it is ranked as a whole)."""
    if not isinstance(value, list) or len(value) > contract.TOP_TRIALS:
        return None
    out: list[Obj] = []
    for entry in value:
        if not isinstance(entry, dict):
            return None
        trial_id = _text(MAX_TEXT)(entry.get("trialId"))
        score = _score(entry.get("score"))
        hps = _hyperparameters(entry.get("hyperparameters", {}))
        if trial_id is None or score is None or hps is None:
            return None
        out.append({"trialId": trial_id, "score": score, "hyperparameters": hps})
    return out


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "phase": _enum(contract.PHASES),
    "trialId": _text(MAX_TEXT),
    "trialsCompleted": _integer(10**9),
    "trialsTotal": _integer(10**9),
    "execution": _integer(10**9),
    "epoch": _integer(10**9),
    "step": _integer(10**12),
    "resumedFromStep": _integer(10**12),
    "resumedFromEpoch": _integer(10**9),
    "restores": _integer(10**9),
    "checkpointBytes": _integer(10**18),
    "volumeFreeBytes": _integer(10**18),
    "checkpointCostSeconds": _seconds(1e9),
    "checkpointIntervalSeconds": _seconds(1e9),
    "mtbfSeconds": _seconds(1e12),
    "expectedWasteSecondsPerHour": _seconds(1e12),
    "lastProgressTime": _time,
    "lastCheckpointTime": _time,
    "bestTrialId": _text(MAX_TEXT),
    "bestScore": _score,
    "bestHyperparameters": _hyperparameters,
    "objective": _text(MAX_TEXT),
    "direction": _enum(("min", "max")),
    "topTrials": _top_trials,
    "message": _text(MAX_MESSAGE, empty=True),
    "version": _integer(1000, low=1),
}
"""One check per field of tuneop_contract.Progress, with the CRD's bounds for it."""
FIELDS = tuple(_CHECKS)


def read(raw: Any, source: str = "status.progress") -> ProgressView:
    """The valid fields of `raw` (a record: status.progress or the ConfigMap's); the
    rest named in `ignored`. Fields the contract does not have are left out."""
    if raw is None or raw == {}:
        return ProgressView({})
    if not isinstance(raw, dict):
        return ProgressView({}, (source,))
    values: Obj = {}
    ignored: list[str] = []
    for key, check in _CHECKS.items():
        if raw.get(key) is None:
            continue
        value = check(raw[key])
        if value is None:
            ignored.append(f"{source}.{key}")
        else:
            values[key] = value
    return ProgressView(values, tuple(ignored))


def top_trials_status(entries: list[Obj]) -> list[Obj]:
    """`status.topTrials` from checked entries: each like `status.bestTrial`."""
    return [
        {"id": e["trialId"], "score": e["score"], "hyperparameters": e["hyperparameters"]}
        for e in entries
    ]


def from_configmap(
    configmap: Obj | None, name: str, tuner_id: str | None = None
) -> ProgressView | None:
    """The record of `tuner_id` (None: the sequential trainer's) in the job's progress
    ConfigMap `name`; None while it holds none (not created yet, or reset for a new
    pod group and not yet reported to)."""
    source = f"configmaps/{name}"
    try:
        raw = contract.progress_from_configmap(configmap, tuner_id)
    except ValueError:
        return ProgressView({}, (f"{source}:{contract.progress_key(tuner_id)}",))
    return None if raw is None else read(raw, source)
