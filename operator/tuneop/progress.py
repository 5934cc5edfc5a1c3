"""`status.progress` as the operator reads it. The trainer writes that record (any
trainer version, or anyone with patch rights on the status), so each field is checked on
its own: a value of the wrong type or out of range is dropped and named, never an
exception that would stop the job's reconciliation on every pass."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from . import status as st

Obj = dict[str, Any]

_COUNTS = ("trialsCompleted", "trialsTotal", "resumedFromStep", "resumedFromEpoch", "restores")
_TEXTS = ("trialId",)
_TIMES = ("lastProgressTime", "lastCheckpointTime")
MAX_TEXT = 256


@dataclasses.dataclass(frozen=True)
class ProgressView:
    """The fields of status.progress the operator uses; None = absent or invalid."""

    values: Obj
    ignored: tuple[str, ...] = ()
    """`status.progress.<field>` of each value dropped, for the log."""

    def count(self, key: str) -> int | None:
        value = self.values.get(key)
        return value if isinstance(value, int) else None

    def text(self, key: str) -> str | None:
        value = self.values.get(key)
        return value if isinstance(value, str) else None

    @property
    def empty(self) -> bool:
        return not self.values


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value < 2**63 else None


def _text(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value)
    return text if 0 < len(text) <= MAX_TEXT else None


def _score(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _time(value: Any) -> str | None:
    return value if st.parse_time(value) is not None else None


def _field(key: str, value: Any) -> Any:
    if key in _COUNTS:
        return _count(value)
    if key in _TEXTS or key == "bestTrialId":
        return _text(value)
    if key == "bestScore":
        return _score(value)
    if key == "bestHyperparameters":
        return value if isinstance(value, dict) else None
    if key in _TIMES:
        return _time(value)
    return value


USED = (*_COUNTS, *_TEXTS, *_TIMES, "bestTrialId", "bestScore", "bestHyperparameters")


def read(raw: Any) -> ProgressView:
    """The usable fields of `raw` (status.progress); the rest named in `ignored`."""
    if raw is None or raw == {}:
        return ProgressView({})
    if not isinstance(raw, dict):
        return ProgressView({}, ("status.progress",))
    values: Obj = {}
    ignored: list[str] = []
    for key in USED:
        if raw.get(key) is None:
            continue
        value = _field(key, raw[key])
        if value is None:
            ignored.append(f"status.progress.{key}")
        else:
            values[key] = value
    return ProgressView(values, tuple(ignored))
