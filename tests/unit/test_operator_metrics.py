"""The operator's Prometheus metrics: agreed names, only namespace/tuningjob labels."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tuneop.metrics import JobMetrics

AGREED = {
    "tuneop_tuningjob_last_progress_timestamp_seconds",
    "tuneop_tuningjob_last_checkpoint_timestamp_seconds",
    "tuneop_tuningjob_stall_timeout_seconds",
    "tuneop_tuningjob_trials_completed",
    "tuneop_tuningjob_trials_planned",
    "tuneop_tuningjob_best_score",
    "tuneop_tuningjob_preemptions_total",
    "tuneop_tuningjob_failures_total",
    "tuneop_tuningjob_restores_total",
    "tuneop_tuningjob_stalled",
    "tuneop_tuningjob_phase",
}


def _group(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def test_series_names_labels_and_values():
    jobs = JobMetrics()
    status = {
        "phase": "Running",
        "lastProgressTime": "2026-01-01T00:00:10Z",
        "lastCheckpointTime": "2026-01-01T00:00:05Z",
        "trialsCompleted": 3,
        "trialsTotal": 10,
        "bestTrial": {"id": "0001", "score": 0.75, "hyperparameters": {"units": 8}},
        "preemptions": 2,
        "failures": 1,
        "restores": 2,
        "conditions": [{"type": "Stalled", "status": "True"}],
    }
    jobs.observe("ml", "emg", {"stallTimeoutSeconds": 600}, status)
    samples = _group_from(jobs)
    names = {n for n in samples if not n.endswith("_created")}
    assert names == AGREED
    for series in samples.values():
        for sample in series:
            assert set(sample.labels) <= {"namespace", "tuningjob", "phase"}
            assert sample.labels["tuningjob"] == "emg"
    one = {n: s[0].value for n, s in samples.items() if n != "tuneop_tuningjob_phase"}
    assert one["tuneop_tuningjob_last_progress_timestamp_seconds"] == 1767225610.0
    assert one["tuneop_tuningjob_stall_timeout_seconds"] == 600
    assert one["tuneop_tuningjob_trials_completed"] == 3
    assert one["tuneop_tuningjob_trials_planned"] == 10
    assert one["tuneop_tuningjob_best_score"] == 0.75
    assert one["tuneop_tuningjob_preemptions_total"] == 2
    assert one["tuneop_tuningjob_failures_total"] == 1
    assert one["tuneop_tuningjob_restores_total"] == 2
    assert one["tuneop_tuningjob_stalled"] == 1
    phases = {s.labels["phase"]: s.value for s in samples["tuneop_tuningjob_phase"]}
    assert phases == {"Pending": 0, "Running": 1, "Suspended": 0, "Succeeded": 0, "Failed": 0}
    jobs.forget("ml", "emg")
    assert all(not series for series in _group_from(jobs).values())


def _group_from(jobs: JobMetrics) -> dict[str, list]:
    registry = CollectorRegistry()
    registry.register(jobs)
    return _group(generate_latest(registry).decode())
