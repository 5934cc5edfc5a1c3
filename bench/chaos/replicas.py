"""Two operator replicas peering, as the chart runs them: the active one can be killed
(SIGKILL), the other takes over, and the killed one comes back as the new standby (a
priority below the leader's). Each incarnation's RSS is sampled for the memory
invariant."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.operator import apimeasure as am
from tests.e2e.harness import Operator, wait_for

TOP_PRIORITY = 10_000
"""Far above the e2e session operator's (it pauses while the soak's replicas run); each
restarted replica takes one less than the lowest alive, so hundreds of kills stay above."""


class Replicas:
    """The pair; `kill_active` is what the operator-kill fault does."""

    def __init__(self, kubeconfig: Path, logs: Path, lifetime: int = 15) -> None:
        self.kubeconfig = kubeconfig
        self.logs = logs
        self.lifetime = lifetime
        self.alive: list[tuple[Operator, int]] = []
        self.rss: dict[str, list[float]] = {}
        self._started = 0
        self._lock = threading.Lock()
        self.on_change: Callable[[list[int]], None] | None = None
        """Told the live replicas' metrics ports whenever one starts or is killed."""

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change([op.metrics_port for op, _ in self.alive])

    def _start(self, priority: int) -> Operator:
        self._started += 1
        name = f"replica-{self._started}"
        operator = Operator(
            self.kubeconfig,
            self.logs / f"{name}.log",
            TUNEOP_OPERATOR_PRIORITY=str(priority),
            TUNEOP_OPERATOR_PEERING_LIFETIME_SECONDS=str(self.lifetime),
        ).start()
        self.alive.append((operator, priority))
        self.rss[name] = []
        self._changed()
        return operator

    def start(self) -> None:
        first = self._start(TOP_PRIORITY)
        self._start(TOP_PRIORITY - 1)
        wait_for(first.leads, 120, "the first replica leading", every=0.5)

    def active(self) -> Operator | None:
        return next((op for op, _ in self.alive if op.leads()), None)

    def kill_active(self, timeout: float = 180) -> float:
        """SIGKILL the leader; the standby takes over; the killed one is started again
        as the standby. Returns the seconds until the standby led."""
        with self._lock:
            leader = wait_for(self.active, 120, "a leading replica", every=0.5)
            leader.kill()
            self.alive = [(op, p) for op, p in self.alive if op is not leader]
            self._changed()
            start = time.monotonic()
            ((standby, _),) = self.alive
            wait_for(standby.leads, timeout, "the standby taking over", every=0.5)
            took = time.monotonic() - start
            self._start(min(p for _, p in self.alive) - 1)
            return took

    def sample_rss(self) -> None:
        """One RSS sample (MiB) of every live replica."""
        with self._lock:
            for operator, _ in self.alive:
                with contextlib.suppress(OSError, AssertionError, KeyError):
                    name = Path(operator.log_path).stem
                    self.rss.setdefault(name, []).append(am.rss(operator)["VmRSS"])

    def stop(self) -> None:
        for operator, _ in self.alive:
            operator.stop()
        self.alive = []
