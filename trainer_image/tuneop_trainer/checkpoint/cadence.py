"""When the next periodic checkpoint is due: every `intervalSteps` steps and/or every
`intervalSeconds` seconds, or, with `intervalSeconds: auto`, at the interval that wastes
least for this job (Young/Daly: T = sqrt(2 C M)) where C is what a save costs training,
measured here from the saves made, and M the job's mean time between disruptions, which
the operator passes in TUNEOP_MTBF_SECONDS. docs/design/trainer.md, "Checkpoint cadence".

Thread use: `blocked` is called by the training thread, `written` by the checkpoint
writer's thread; a lock keeps the two averages and the interval consistent."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping
from typing import Any

from tuneop_contract import ENV_MTBF_SECONDS, MTBF_PRIOR_SECONDS, expected_waste_per_hour
from tuneop_contract.spec import Checkpoint, SpecError

OVERHEAD_BUDGET = 0.02
"""Saves may cost training at most this share of its time: T >= C / OVERHEAD_BUDGET
(the floor wins over the upper bounds below when they disagree)."""
MIN_INTERVAL_SECONDS = 5.0
"""Never more often than this, whatever a tiny C and M give (progress, file churn)."""
MAX_INTERVAL_SECONDS = 3600.0
"""Never less often than this: at most an hour of work at risk on a SIGKILL. (No cap at
M/2, where the first-order model T << M ends, is needed: sqrt(2 C M) > M/2 means
C > M/8, and the budget floor 50 C is then above M/2 already and wins.)"""
COST_WEIGHT = 0.3
"""Weight of the newest save in the cost's exponential moving average: adapts within a
few saves (a larger model after a trial change) without jumping on one slow save."""


def optimal_interval(cost: float, mtbf: float, maximum: float = MAX_INTERVAL_SECONDS) -> float:
    """The interval of `cost`-second saves that wastes least at `mtbf`, within the caps:
    sqrt(2 C M), at most `maximum`, then at least max(MIN_INTERVAL_SECONDS,
    C / OVERHEAD_BUDGET)."""
    young_daly = math.sqrt(2.0 * max(cost, 0.0) * mtbf)
    lower = max(MIN_INTERVAL_SECONDS, cost / OVERHEAD_BUDGET)
    return max(lower, min(young_daly, maximum))


def mtbf_from_env(environ: Mapping[str, str] | None = None) -> float:
    """TUNEOP_MTBF_SECONDS (set by the operator), else the contract's prior. SpecError
    naming the variable when it is not a positive number."""
    raw = (os.environ if environ is None else environ).get(ENV_MTBF_SECONDS)
    if raw is None or raw == "":
        return MTBF_PRIOR_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise SpecError(ENV_MTBF_SECONDS, f'"{raw}" must be a number of seconds > 0')
    return value


class Cadence:
    """One per trainer process (the cost average outlives a trial): the periodic
    checkpoint rule of `spec` and, with auto, the measured cost and chosen interval."""

    def __init__(self, spec: Checkpoint, mtbf: float = MTBF_PRIOR_SECONDS) -> None:
        self.spec = spec
        self.mtbf = mtbf
        self._lock = threading.Lock()
        self._blocked: float | None = None  # EMA, training-thread seconds per save
        self._writer_cpu: float | None = None  # EMA, writer-thread CPU seconds per save
        self.maximum = min(MAX_INTERVAL_SECONDS, spec.max_interval_seconds)
        """The interval's upper cap: MAX_INTERVAL_SECONDS, or the job's stall timeout."""
        self._interval = float(spec.interval_seconds)
        if spec.auto_interval:  # until a save is measured
            self._interval = min(self._interval, self.maximum)

    def due(self, steps_since: int, seconds_since: float) -> bool:
        """A periodic checkpoint is due after `steps_since` steps and `seconds_since`
        seconds since the last one. With auto the step count is not used: it is not a
        cost, and would override the interval chosen for the job."""
        if self.spec.auto_interval:
            return seconds_since >= self.interval
        cp = self.spec
        due_steps = cp.interval_steps > 0 and steps_since >= cp.interval_steps
        return due_steps or (cp.interval_seconds > 0 and seconds_since >= cp.interval_seconds)

    @property
    def interval(self) -> float:
        with self._lock:
            return self._interval

    @property
    def cost(self) -> float | None:
        """Seconds of training one save costs, once a save has been measured."""
        with self._lock:
            return self._cost()

    def _cost(self) -> float | None:
        if self._blocked is None and self._writer_cpu is None:
            return None
        return (self._blocked or 0.0) + (self._writer_cpu or 0.0)

    def blocked(self, seconds: float) -> None:
        """The training thread spent `seconds` handing a save over (host copy, waiting
        for the previous save still in flight)."""
        with self._lock:
            self._blocked = _ema(self._blocked, seconds)
            self._adapt()

    def written(self, cpu_seconds: float) -> None:
        """The writer thread used `cpu_seconds` of CPU for a save (serialising, hashing,
        writing): on a trainer whose steps keep the cores busy, time taken from them."""
        with self._lock:
            self._writer_cpu = _ema(self._writer_cpu, cpu_seconds)
            self._adapt()

    def _adapt(self) -> None:
        cost = self._cost()
        if self.spec.auto_interval and cost is not None:
            self._interval = optimal_interval(cost, self.mtbf, self.maximum)

    def report(self) -> dict[str, Any]:
        """The Progress fields of the cadence: the cost once a save is measured; with
        auto the MTBF, and once a save is measured the interval chosen and its expected
        waste (a process that never saves, like a parallel search's oracle, reports no
        interval: the start value was not chosen for anything)."""
        with self._lock:
            cost = self._cost()
            fields: dict[str, Any] = {}
            if self.spec.auto_interval:
                fields["mtbf_seconds"] = round(self.mtbf, 1)
            if cost is None:
                return fields
            fields["checkpoint_cost_seconds"] = round(cost, 6)
            if self.spec.auto_interval:
                waste = expected_waste_per_hour(self._interval, cost, self.mtbf)
                fields["checkpoint_interval_seconds"] = round(self._interval, 3)
                fields["expected_waste_seconds_per_hour"] = round(waste, 3)
            return fields


def _ema(old: float | None, new: float) -> float:
    return new if old is None else COST_WEIGHT * new + (1.0 - COST_WEIGHT) * old
