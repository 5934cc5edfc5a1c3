"""Prometheus metrics of the operator (port 8080, /metrics). Per-job series carry only
the labels `namespace` and `tuningjob` (never trial ids, pod uids or hyperparameters).
Values are taken from each job's status after every reconcile, so counters are the
status counts (monotonic over a job's life) and a restarted operator reports the same
numbers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import status as st

Obj = dict[str, Any]
LABELS = ["namespace", "tuningjob"]

GAUGES = {
    "tuneop_tuningjob_last_progress_timestamp_seconds": "Last trainer progress (Unix time).",
    "tuneop_tuningjob_last_checkpoint_timestamp_seconds": "Last trainer checkpoint (Unix time).",
    "tuneop_tuningjob_stall_timeout_seconds": "spec.stallTimeoutSeconds of the job.",
    "tuneop_tuningjob_trials_completed": "Trials finished.",
    "tuneop_tuningjob_trials_planned": "Trials planned (when the tuner knows).",
    "tuneop_tuningjob_best_score": "Objective value of the best trial so far.",
    "tuneop_tuningjob_stalled": "1 while the job has condition Stalled=True.",
}
COUNTERS = {
    "tuneop_tuningjob_preemptions": "Trainer pod groups lost to disruption.",
    "tuneop_tuningjob_failures": "Trainer failures (failure budget).",
    "tuneop_tuningjob_restores": "Times a recreated trainer resumed from a checkpoint.",
}


def _timestamp(value: Any) -> float | None:
    parsed = st.parse_time(value)
    return parsed.timestamp() if parsed else None


def snapshot(spec: Obj, status: Obj) -> dict[str, float | str | None]:
    """The numbers exported for one job, from its spec and (merged) status."""
    best = status.get("bestTrial") or {}
    return {
        "tuneop_tuningjob_last_progress_timestamp_seconds": _timestamp(
            status.get("lastProgressTime")
        ),
        "tuneop_tuningjob_last_checkpoint_timestamp_seconds": _timestamp(
            status.get("lastCheckpointTime")
        ),
        "tuneop_tuningjob_stall_timeout_seconds": float(spec.get("stallTimeoutSeconds", 900)),
        "tuneop_tuningjob_trials_completed": float(status.get("trialsCompleted") or 0),
        "tuneop_tuningjob_trials_planned": (
            float(status["trialsTotal"]) if status.get("trialsTotal") is not None else None
        ),
        "tuneop_tuningjob_best_score": (
            float(best["score"]) if best.get("score") is not None else None
        ),
        "tuneop_tuningjob_stalled": (
            1.0 if st.condition_is(status.get("conditions") or [], st.COND_STALLED) else 0.0
        ),
        "tuneop_tuningjob_preemptions": float(status.get("preemptions") or 0),
        "tuneop_tuningjob_failures": float(status.get("failures") or 0),
        "tuneop_tuningjob_restores": float(status.get("restores") or 0),
        "phase": str(status.get("phase") or st.PHASE_PENDING),
    }


class JobMetrics(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], dict[str, float | str | None]] = {}

    def observe(self, namespace: str, name: str, spec: Obj, status: Obj) -> None:
        values = snapshot(spec, status)
        with self._lock:
            self._jobs[(namespace, name)] = values

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._jobs.pop((namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            jobs = dict(self._jobs)
        for metric_name, help_text in GAUGES.items():
            gauge = GaugeMetricFamily(metric_name, help_text, labels=LABELS)
            for (ns, name), values in jobs.items():
                value = values.get(metric_name)
                if isinstance(value, float):
                    gauge.add_metric([ns, name], value)
            yield gauge
        for metric_name, help_text in COUNTERS.items():
            counter = CounterMetricFamily(metric_name, help_text, labels=LABELS)
            for (ns, name), values in jobs.items():
                value = values.get(metric_name)
                if isinstance(value, float):
                    counter.add_metric([ns, name], value)
            yield counter
        phase = GaugeMetricFamily(
            "tuneop_tuningjob_phase",
            "1 for the job's current phase, 0 for the others.",
            labels=[*LABELS, "phase"],
        )
        for (ns, name), values in jobs.items():
            for candidate in st.PHASES:
                phase.add_metric(
                    [ns, name, candidate], 1.0 if values["phase"] == candidate else 0.0
                )
        yield phase


JOBS = JobMetrics()


def register(registry: CollectorRegistry = REGISTRY) -> None:
    registry.register(JOBS)


def serve(port: int, registry: CollectorRegistry = REGISTRY) -> None:
    """Serve /metrics on `port` (0 = off) in a background thread."""
    if port > 0:
        start_http_server(port, registry=registry)
