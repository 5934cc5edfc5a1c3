"""How each job's reconcile loop is doing, for `/healthz` and the metrics.

A loop that keeps failing (the API unreachable, a half-open connection timing out, a
forbidden write) otherwise shows only as log lines and a counter. Here each loop's
consecutive failures and the time of its last good pass are kept, exported per job
(`tuneop_tuningjob_last_reconcile_success_timestamp_seconds`,
`tuneop_tuningjob_reconcile_consecutive_errors`) and summarised by the liveness probe.

The probe fails (HTTP 500, so the kubelet restarts the operator) only when loops are
failing and no loop at all has completed a pass for `unhealthy_after` seconds: the
operator as a whole is stuck, which a restart can mend. One job whose passes fail while
others succeed is named in the probe's report and in its metrics (and alerted on), but
does not restart the operator: a restart would not mend that job and would pause all
the others.

A loop with no pass for LOOP_STALE_SECONDS has stopped (its job was deleted while
another replica led and ran the clean-up, or this replica paused): it is dropped, so a
deleted job's last failure is not exported for ever (and TuneopReconcileFailing does not
fire for a job that is gone).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

Key = tuple[str, str]
LOOP_STALE_SECONDS = 300.0
"""Five times the longest error backoff of a loop (60 s): a loop that still runs, even
failing, passes well within it."""


@dataclasses.dataclass
class _Loop:
    started: float
    last_success: float | None = None
    errors: int = 0
    last_pass: float = 0.0
    """When a pass of it last ended, good or failed."""


class Unhealthy(Exception):
    """Every loop is failing: the message says since when and names some of them."""


class LoopHealth:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._loops: dict[Key, _Loop] = {}
        self._clock = clock
        self._started = clock()
        self._last_success: float | None = None

    def succeeded(self, key: Key) -> None:
        """A pass of `key`'s loop completed (decided and applied, or waited on purpose)."""
        now = self._clock()
        with self._lock:
            loop = self._loops.setdefault(key, _Loop(started=now))
            loop.last_success, loop.errors, loop.last_pass = now, 0, now
            self._last_success = now

    def failed(self, key: Key) -> int:
        """A pass of `key`'s loop failed; returns its consecutive failures."""
        now = self._clock()
        with self._lock:
            loop = self._loops.setdefault(key, _Loop(started=now))
            loop.errors, loop.last_pass = loop.errors + 1, now
            return loop.errors

    def forget(self, key: Key) -> None:
        with self._lock:
            self._loops.pop(key, None)

    def _drop_stale(self) -> None:
        """Forget the loops that stopped (caller holds the lock)."""
        oldest = self._clock() - LOOP_STALE_SECONDS
        for key in [k for k, loop in self._loops.items() if loop.last_pass < oldest]:
            del self._loops[key]

    def report(self) -> dict[str, object]:
        """The probe's body: loops, the failing ones and their consecutive failures."""
        with self._lock:
            self._drop_stale()
            loops = len(self._loops)
            failing = {f"{ns}/{n}": loop.errors for (ns, n), loop in self._loops.items()}
        return {"loops": loops, "failing": {k: v for k, v in sorted(failing.items()) if v}}

    def check(self, unhealthy_after: float) -> dict[str, object]:
        """`report()`, or Unhealthy when loops are failing and none has completed a pass
        for `unhealthy_after` seconds (since the operator started, if none ever did)."""
        report = self.report()
        failing = report["failing"]
        with self._lock:
            since = self._last_success if self._last_success is not None else self._started
        quiet = self._clock() - since
        if isinstance(failing, dict) and failing and quiet >= unhealthy_after:
            names = ", ".join(list(failing)[:5])
            raise Unhealthy(
                f"no reconcile pass has succeeded for {quiet:.0f}s and {len(failing)} job "
                f"loop(s) are failing ({names})"
            )
        return report

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            self._drop_stale()
            loops = {key: dataclasses.replace(loop) for key, loop in self._loops.items()}
        last = GaugeMetricFamily(
            "tuneop_tuningjob_last_reconcile_success_timestamp_seconds",
            "Unix time of the job's last reconcile pass that completed (before its first: "
            "when its loop started).",
            labels=["namespace", "tuningjob"],
        )
        errors = GaugeMetricFamily(
            "tuneop_tuningjob_reconcile_consecutive_errors",
            "Reconcile passes of the job that failed since its last good one.",
            labels=["namespace", "tuningjob"],
        )
        for (ns, name), loop in sorted(loops.items()):
            stamp = loop.last_success if loop.last_success is not None else loop.started
            last.add_metric([ns, name], stamp)
            errors.add_metric([ns, name], float(loop.errors))
        yield last
        yield errors


LOOPS = LoopHealth()
