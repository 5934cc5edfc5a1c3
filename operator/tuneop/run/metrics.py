"""Prometheus metrics of the operator (port 8080, /metrics). Per-job series carry only
the labels `namespace` and `tuningjob` (never trial ids, pod uids or hyperparameters);
`tuneop_tuningjob_phase` adds `phase` and `tuneop_tuningjob_stalled` the Stalled
condition's `reason`, both from small fixed sets.
Values are taken from each job's status after every reconcile, so counters are the
status counts (monotonic over a job's life) and a restarted operator reports the same
numbers.

Only the active replica exports job series. With two replicas and kopf peering, the
standby's reconcile daemons are stopped, so its last snapshot of each job would
otherwise be exported for ever and, through the `max by` of the alerts, keep a finished
or deleted job "Running". Two guards, both in the collector:

- `tuneop_operator_leader` (1/0): the replica's peering state. `PeeringLeadership`, a
  logging handler on kopf's peering logger, sets it from kopf's own pause/resume
  decisions; `set_leader()` sets it directly. A process starts as leader (kopf starts
  unpaused; standalone mode has no peers). While it is 0 no job series are exported.
- freshness: a job not observed for `stale_after` seconds (its daemon stopped, or every
  pass of it fails) is not exported either.

Operator-wide series (no labels): `tuneop_operator_leader`,
`tuneop_reconcile_passes_total` (passes that reached a decision and applied it, counted
by `JobMetrics.observe`), `tuneop_reconcile_errors_total` (passes that failed,
counted by `reconcile_failed()`, which the reconcile loop calls on a failed pass) and
`tuneop_reconcile_live_reads_total` (passes that read their objects live, run.watched).
Per job, also while its passes fail (run.health):
`tuneop_tuningjob_last_reconcile_success_timestamp_seconds` and
`tuneop_tuningjob_reconcile_consecutive_errors`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from tuneop_contract.spec import JobSpec

from ..api import names
from ..api import status as st
from . import health

Obj = dict[str, Any]
LABELS = ["namespace", "tuningjob"]

GAUGES = {
    "tuneop_tuningjob_last_progress_timestamp_seconds": "Last trainer progress (Unix time).",
    "tuneop_tuningjob_last_checkpoint_timestamp_seconds": "Last trainer checkpoint (Unix time).",
    "tuneop_tuningjob_completion_timestamp_seconds": (
        "When the job reached Succeeded or Failed (status.completionTime, Unix time)."
    ),
    "tuneop_tuningjob_stall_timeout_seconds": "spec.stallTimeoutSeconds of the job.",
    "tuneop_tuningjob_max_failures": "spec.failurePolicy.maxFailures of the job.",
    "tuneop_tuningjob_trials_completed": "Trials finished.",
    "tuneop_tuningjob_trials_planned": "Trials planned (when the tuner knows).",
    "tuneop_tuningjob_best_score": "Objective value of the best trial so far.",
    "tuneop_tuningjob_stalled": (
        "1 while the job has condition Stalled=True, label reason its reason; 0 otherwise "
        "(no reason)."
    ),
    "tuneop_tuningjob_parallel_trials": "spec.parallelTrials: trials the job runs at once.",
    "tuneop_tuningjob_running_trials": "Trial groups training now (trainer pods Running).",
    "tuneop_tuningjob_goodput_percent": (
        "Share of the job's GPU time not lost to preemption (status.goodput.percent)."
    ),
    "tuneop_tuningjob_shape_gpus": (
        "GPUs of the shape in use with spec.distribution.elastic (status.shape.gpus); "
        "absent without elastic shapes."
    ),
    "tuneop_tuningjob_checkpoint_interval_seconds": (
        "Checkpoint interval the trainer chose (intervalSeconds auto; "
        "status.progress.checkpointIntervalSeconds)."
    ),
    "tuneop_tuningjob_checkpoint_expected_waste_seconds_per_hour": (
        "Seconds per hour expected lost to checkpoints and redone work at that interval "
        "(status.progress.expectedWasteSecondsPerHour)."
    ),
}
COUNTERS = {
    "tuneop_tuningjob_preemptions": "Trainer pod groups lost to disruption.",
    "tuneop_tuningjob_failures": "Trainer failures (failure budget).",
    "tuneop_tuningjob_trial_ooms": "Trials that ran out of memory, recorded FAILED.",
    "tuneop_tuningjob_restores": "Times a recreated trainer resumed from a checkpoint.",
    "tuneop_tuningjob_allocated_gpu_seconds": "GPU-seconds the job's trainer pods held.",
    "tuneop_tuningjob_lost_gpu_seconds": (
        "GPU-seconds lost to preemption: work redone since the last checkpoint plus the "
        "time until training resumed."
    ),
}
STALLED = "tuneop_tuningjob_stalled"
STALLED_REASON = "stalled_reason"
"""Key of the Stalled condition's reason in a snapshot: label `reason` of STALLED (a
bounded set: NoProgress and the pending reasons), so the alert can carry it."""
RECOVERY_BUCKETS = (5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Seconds from a pod's loss to its replacement's next training step."""
STALE_AFTER_SECONDS = 300.0
"""A job not observed for this long is not exported: five times the longest error
backoff of the reconcile loop (60 s), so a job whose passes fail for a while keeps its
series, and a stopped daemon's snapshot is gone within five minutes."""


def _timestamp(value: Any) -> float | None:
    parsed = st.parse_time(value)
    return parsed.timestamp() if parsed else None


def _max_failures(spec: JobSpec) -> float | None:
    """None when the spec's failurePolicy was refused: its default would not be the job's."""
    if any(e.field.startswith("spec.failurePolicy") for e in spec.errors):
        return None
    return float(spec.failure_policy.max_failures)


def _running_trials(status: Obj) -> float:
    """Trial groups in state Running (parallel jobs), else 1 while the job runs."""
    groups = status.get(st.GROUPS)
    if isinstance(groups, list) and groups:
        return float(
            sum(
                1
                for g in groups
                if isinstance(g, dict)
                and g.get(st.GROUP_NAME) != names.ORACLE_GROUP
                and g.get(st.GROUP_STATE) == "Running"
            )
        )
    return 1.0 if status.get(st.PHASE) == st.PHASE_RUNNING else 0.0


def _goodput(status: Obj, key: str) -> float | None:
    value = (
        (status.get(st.GOODPUT) or {}).get(key)
        if isinstance(status.get(st.GOODPUT), dict)
        else None
    )
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _progress_number(status: Obj, key: str) -> float | None:
    progress = status.get(st.PROGRESS)
    value = progress.get(key) if isinstance(progress, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def snapshot(raw_spec: Obj, status: Obj) -> dict[str, float | str | None]:
    """The numbers exported for one job, from its spec and (merged) status."""
    spec = JobSpec.from_dict(raw_spec)
    best = status.get(st.BEST_TRIAL) or {}
    conditions = status.get(st.CONDITIONS) or []
    stalled_reason = ""
    if st.condition_is(conditions, st.COND_STALLED):
        stalled_reason = str(
            (st.get_condition(conditions, st.COND_STALLED) or {}).get("reason") or ""
        )
        stalled_reason = stalled_reason or st.COND_STALLED
    return {
        "tuneop_tuningjob_last_progress_timestamp_seconds": _timestamp(
            status.get(st.LAST_PROGRESS_TIME)
        ),
        "tuneop_tuningjob_last_checkpoint_timestamp_seconds": _timestamp(
            status.get(st.LAST_CHECKPOINT_TIME)
        ),
        "tuneop_tuningjob_completion_timestamp_seconds": _timestamp(status.get(st.COMPLETION_TIME)),
        "tuneop_tuningjob_stall_timeout_seconds": float(spec.stall_timeout_seconds),
        "tuneop_tuningjob_max_failures": _max_failures(spec),
        "tuneop_tuningjob_trials_completed": float(status.get(st.TRIALS_COMPLETED) or 0),
        "tuneop_tuningjob_trials_planned": (
            float(status[st.TRIALS_TOTAL]) if status.get(st.TRIALS_TOTAL) is not None else None
        ),
        "tuneop_tuningjob_best_score": (
            float(best["score"]) if best.get("score") is not None else None
        ),
        "tuneop_tuningjob_stalled": 1.0 if stalled_reason else 0.0,
        "tuneop_tuningjob_parallel_trials": float(spec.parallel_trials),
        "tuneop_tuningjob_running_trials": _running_trials(status),
        "tuneop_tuningjob_goodput_percent": _goodput(status, st.GOODPUT_PERCENT),
        "tuneop_tuningjob_shape_gpus": _shape_gpus(status),
        "tuneop_tuningjob_checkpoint_interval_seconds": _progress_number(
            status, "checkpointIntervalSeconds"
        ),
        "tuneop_tuningjob_checkpoint_expected_waste_seconds_per_hour": _progress_number(
            status, "expectedWasteSecondsPerHour"
        ),
        "tuneop_tuningjob_allocated_gpu_seconds": _goodput(status, st.GOODPUT_ALLOCATED) or 0.0,
        "tuneop_tuningjob_lost_gpu_seconds": _goodput(status, st.GOODPUT_LOST) or 0.0,
        "tuneop_tuningjob_preemptions": float(status.get(st.PREEMPTIONS) or 0),
        "tuneop_tuningjob_failures": float(status.get(st.FAILURES) or 0),
        "tuneop_tuningjob_trial_ooms": float(status.get(st.TRIAL_OOMS) or 0),
        "tuneop_tuningjob_restores": float(status.get(st.RESTORES) or 0),
        "phase": str(status.get(st.PHASE) or st.PHASE_PENDING),
        STALLED_REASON: stalled_reason,
    }


def _shape_gpus(status: Obj) -> float | None:
    shape = status.get(st.SHAPE)
    gpus = shape.get("gpus") if isinstance(shape, dict) else None
    return float(gpus) if isinstance(gpus, int | float) else None


class JobMetrics(Collector):
    def __init__(
        self,
        stale_after: float = STALE_AFTER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], tuple[float, dict[str, float | str | None]]] = {}
        self._stale_after = stale_after
        self._clock = clock
        self._leader = True
        self._passes = 0
        self._errors = 0
        self._live_reads = 0
        self._recoveries: dict[str, list[float]] = {}
        """reason -> per-bucket counts (RECOVERY_BUCKETS, then +Inf), then the sum."""

    def observe(self, namespace: str, name: str, spec: Obj, status: Obj) -> None:
        """A pass of the job's reconcile loop decided and applied: export its numbers."""
        values = snapshot(spec, status)
        with self._lock:
            self._jobs[(namespace, name)] = (self._clock(), values)
            self._passes += 1

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._jobs.pop((namespace, name), None)

    def recovered(self, reason: str, seconds: float) -> None:
        """A preempted pod group trained again `seconds` after its loss (`reason`)."""
        with self._lock:
            counts = self._recoveries.setdefault(reason, [0.0] * (len(RECOVERY_BUCKETS) + 2))
            for i, bound in enumerate(RECOVERY_BUCKETS):
                if seconds <= bound:
                    counts[i] += 1
            counts[len(RECOVERY_BUCKETS)] += 1
            counts[-1] += seconds

    def reconcile_failed(self) -> None:
        """A reconcile pass failed (it will be retried after a backoff)."""
        with self._lock:
            self._errors += 1

    def read_live(self) -> None:
        """A pass read its job's objects from the API server (run.watched did not
        trust what the watches held)."""
        with self._lock:
            self._live_reads += 1

    def set_leader(self, active: bool) -> None:
        """Whether this replica is the active one (kopf peering not paused)."""
        with self._lock:
            self._leader = bool(active)

    @property
    def leader(self) -> bool:
        with self._lock:
            return self._leader

    def _exported(self) -> dict[tuple[str, str], dict[str, float | str | None]]:
        with self._lock:
            if not self._leader:
                return {}
            oldest = self._clock() - self._stale_after
            return {key: values for key, (seen, values) in self._jobs.items() if seen >= oldest}

    def collect(self) -> Iterator[Metric]:
        yield from self._operator_series()
        yield from _job_series(self._exported())

    def _operator_series(self) -> Iterator[Metric]:
        """The replica's own series: leadership, passes, errors, recovery times."""
        with self._lock:
            leader, passes, errors = self._leader, self._passes, self._errors
            live_reads = self._live_reads
        yield GaugeMetricFamily(
            "tuneop_operator_leader",
            "1 while this replica is the active one (exports job series), 0 on a standby.",
            value=1.0 if leader else 0.0,
        )
        yield CounterMetricFamily(
            "tuneop_reconcile_passes",
            "Reconcile passes that decided and applied.",
            value=float(passes),
        )
        yield CounterMetricFamily(
            "tuneop_reconcile_errors",
            "Reconcile passes that failed (retried after a backoff).",
            value=float(errors),
        )
        yield CounterMetricFamily(
            "tuneop_reconcile_live_reads",
            "Passes that read their job, its pods and its progress map from the API server "
            "instead of the watches' cache (first pass after a write, a failure, a resync).",
            value=float(live_reads),
        )
        with self._lock:
            recoveries = {k: list(v) for k, v in self._recoveries.items()}
        histogram = HistogramMetricFamily(
            "tuneop_recovery_seconds",
            "Seconds from a trainer pod's loss to its replacement's next training step, by "
            "disruption reason.",
            labels=["reason"],
        )
        for reason, counts in sorted(recoveries.items()):
            buckets = [(str(b), counts[i]) for i, b in enumerate(RECOVERY_BUCKETS)]
            buckets.append(("+Inf", counts[len(RECOVERY_BUCKETS)]))
            histogram.add_metric([reason], buckets, sum_value=counts[-1])
        yield histogram


def _job_series(jobs: dict[tuple[str, str], dict[str, float | str | None]]) -> Iterator[Metric]:
    """The exported jobs' series, from their snapshots."""
    for metric_name, help_text in GAUGES.items():
        by_reason = metric_name == STALLED
        gauge = GaugeMetricFamily(
            metric_name, help_text, labels=[*LABELS, "reason"] if by_reason else LABELS
        )
        for (ns, name), values in jobs.items():
            value = values.get(metric_name)
            if isinstance(value, float):
                extra = [str(values.get(STALLED_REASON) or "")] if by_reason else []
                gauge.add_metric([ns, name, *extra], value)
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
            phase.add_metric([ns, name, candidate], 1.0 if values["phase"] == candidate else 0.0)
    yield phase


JOBS = JobMetrics()


def reconcile_failed() -> None:
    """Count one failed reconcile pass (`tuneop_reconcile_errors_total`)."""
    JOBS.reconcile_failed()


def set_leader(active: bool) -> None:
    """Set `tuneop_operator_leader`; a standby (False) exports no job series."""
    JOBS.set_leader(active)


PEERING_LOGGER = "kopf._core.engines.peering"
"""kopf's peering module logs its pause and resume decisions here (kopf 1.x)."""


class PeeringLeadership(logging.Handler):
    """Follows kopf's peering decisions into `tuneop_operator_leader`: kopf pauses this
    replica in favour of a higher-priority peer ("Pausing operations ..."), pauses all
    replicas on a priority tie ("Pausing all operators ..."), and resumes when the
    conflict is gone ("Resuming operations ..."). kopf offers no callback for these;
    its log records are the only signal, and tests/unit/test_operator_metrics.py drives
    kopf's own peering code to keep the messages honest. With watched namespaces kopf
    keeps one peering per namespace; replicas' priorities rank them the same way in each,
    so one flag for the process is enough."""

    def __init__(self, jobs: JobMetrics | None = None) -> None:
        super().__init__(level=logging.INFO)
        self._jobs = jobs

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        jobs = self._jobs or JOBS
        if message.startswith("Pausing "):
            jobs.set_leader(False)
        elif message.startswith("Resuming operations"):
            jobs.set_leader(True)


def follow_peering(jobs: JobMetrics | None = None) -> PeeringLeadership:
    """Attach a PeeringLeadership to kopf's peering logger (idempotent) and start as a
    standby: with a named peering kopf starts paused and logs only changes, so a replica
    that joins behind a live leader logs nothing; kopf's "Resuming" makes it the leader."""
    (jobs or JOBS).set_leader(False)
    logger = logging.getLogger(PEERING_LOGGER)
    for handler in logger.handlers:
        if isinstance(handler, PeeringLeadership):
            return handler
    handler = PeeringLeadership(jobs)
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


class LoopSeries(Collector):
    """The job loops' health (health.LoopHealth), exported like the job series: by the
    active replica only."""

    def __init__(self, loops: health.LoopHealth, jobs: JobMetrics) -> None:
        self._loops = loops
        self._jobs = jobs

    def collect(self) -> Iterator[Metric]:
        if self._jobs.leader:
            yield from self._loops.collect()


def register(registry: CollectorRegistry = REGISTRY) -> None:
    registry.register(JOBS)
    registry.register(LoopSeries(health.LOOPS, JOBS))


def serve(port: int, registry: CollectorRegistry = REGISTRY) -> None:
    """Serve /metrics on `port` (0 = off) in a background thread."""
    if port > 0:
        start_http_server(port, registry=registry)
