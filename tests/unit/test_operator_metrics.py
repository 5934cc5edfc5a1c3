"""The operator's Prometheus metrics: agreed names, only namespace/tuningjob labels."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tuneop.run import metrics
from tuneop.run.metrics import JobMetrics

from tests.unit.metric_names import AGREED, OPERATOR, TRAINER


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
        "trialOOMs": 4,
        "restores": 2,
        "completionTime": "2026-01-01T00:00:20Z",
        "conditions": [{"type": "Stalled", "status": "True", "reason": "Unschedulable"}],
        "goodput": {"allocatedGpuSeconds": 50.0, "lostGpuSeconds": 5.0, "percent": 90.0},
        "progress": {"checkpointIntervalSeconds": 120.0, "expectedWasteSecondsPerHour": 45.0},
    }
    jobs.observe("ml", "emg", {"stallTimeoutSeconds": 600}, status)
    samples = _group_from(jobs)
    names = {n for n in samples if not n.endswith("_created")}
    assert names == AGREED | OPERATOR
    for name in OPERATOR:
        assert [s.labels for s in samples[name]] == [{}], name
    for name, series in samples.items():
        if name in OPERATOR or name.endswith("_created"):
            continue
        for sample in series:
            # phase on the phase gauge; the Stalled reason only on the stalled gauge
            extra = {"phase"} if name == "tuneop_tuningjob_phase" else set()
            extra |= {"reason"} if name == "tuneop_tuningjob_stalled" else set()
            assert set(sample.labels) == {"namespace", "tuningjob", *extra}, name
            assert sample.labels["tuningjob"] == "emg"
    one = {n: s[0].value for n, s in samples.items() if n != "tuneop_tuningjob_phase"}
    assert one["tuneop_tuningjob_last_progress_timestamp_seconds"] == 1767225610.0
    assert one["tuneop_tuningjob_checkpoint_interval_seconds"] == 120.0
    assert one["tuneop_tuningjob_checkpoint_expected_waste_seconds_per_hour"] == 45.0
    assert one["tuneop_tuningjob_stall_timeout_seconds"] == 600
    assert one["tuneop_tuningjob_completion_timestamp_seconds"] == 1767225620.0
    assert one["tuneop_tuningjob_max_failures"] == 3  # the spec's default
    assert one["tuneop_operator_leader"] == 1
    assert one["tuneop_reconcile_passes_total"] == 1
    assert one["tuneop_reconcile_errors_total"] == 0
    assert one["tuneop_reconcile_live_reads_total"] == 0
    assert one["tuneop_tuningjob_trials_completed"] == 3
    assert one["tuneop_tuningjob_trials_planned"] == 10
    assert one["tuneop_tuningjob_best_score"] == 0.75
    assert one["tuneop_tuningjob_preemptions_total"] == 2
    assert one["tuneop_tuningjob_failures_total"] == 1
    assert one["tuneop_tuningjob_trial_ooms_total"] == 4
    assert one["tuneop_tuningjob_restores_total"] == 2
    assert one["tuneop_tuningjob_stalled"] == 1
    assert samples["tuneop_tuningjob_stalled"][0].labels["reason"] == "Unschedulable"
    # not stalled: 0 and no reason (an empty label is no label to Prometheus)
    jobs.observe(
        "ml",
        "emg",
        {},
        {**status, "conditions": [{"type": "Stalled", "status": "False", "reason": "Progressing"}]},
    )
    (quiet,) = _group_from(jobs)["tuneop_tuningjob_stalled"]
    assert quiet.value == 0 and quiet.labels["reason"] == ""
    phases = {s.labels["phase"]: s.value for s in samples["tuneop_tuningjob_phase"]}
    assert phases == {"Pending": 0, "Running": 1, "Suspended": 0, "Succeeded": 0, "Failed": 0}
    jobs.forget("ml", "emg")
    assert _job_series(jobs) == set()


def _group_from(jobs: JobMetrics) -> dict[str, list]:
    registry = CollectorRegistry()
    registry.register(jobs)
    return _group(generate_latest(registry).decode())


def _job_series(jobs: JobMetrics) -> set[tuple[str, str]]:
    return {
        (s.labels["namespace"], s.labels["tuningjob"])
        for name, series in _group_from(jobs).items()
        if name not in OPERATOR
        for s in series
        if "tuningjob" in s.labels
    }


def _value(jobs: JobMetrics, name: str) -> float:
    (sample,) = _group_from(jobs)[name]
    return float(sample.value)


def test_a_standby_exports_no_job_series():
    """A replica paused by peering keeps its last snapshots in memory but exports none of
    them (only its leader gauge, 0), so a job finished or deleted meanwhile is not kept
    "Running" by the alerts' `max by`; resumed, it exports them again."""
    jobs = JobMetrics()
    jobs.observe("ml", "a", {"failurePolicy": {"maxFailures": 5}}, {"phase": "Running"})
    assert _job_series(jobs) == {("ml", "a")}
    assert _value(jobs, "tuneop_tuningjob_max_failures") == 5
    jobs.set_leader(False)
    assert _job_series(jobs) == set()
    assert _value(jobs, "tuneop_operator_leader") == 0
    jobs.set_leader(True)
    assert _job_series(jobs) == {("ml", "a")}
    assert _value(jobs, "tuneop_operator_leader") == 1


def test_a_job_not_observed_for_stale_after_is_not_exported():
    now = [1000.0]
    jobs = JobMetrics(stale_after=300, clock=lambda: now[0])
    jobs.observe("ml", "old", {}, {"phase": "Running"})
    now[0] += 200
    jobs.observe("ml", "new", {}, {"phase": "Running"})
    assert _job_series(jobs) == {("ml", "old"), ("ml", "new")}
    now[0] += 150  # old: 350 s, new: 150 s
    assert _job_series(jobs) == {("ml", "new")}
    jobs.observe("ml", "old", {}, {"phase": "Succeeded"})
    assert _job_series(jobs) == {("ml", "old"), ("ml", "new")}


def test_passes_and_errors_are_counted():
    jobs = JobMetrics()
    jobs.observe("ml", "a", {}, {})
    jobs.observe("ml", "a", {}, {})
    jobs.reconcile_failed()
    jobs.read_live()
    assert _value(jobs, "tuneop_reconcile_passes_total") == 2
    assert _value(jobs, "tuneop_reconcile_errors_total") == 1
    assert _value(jobs, "tuneop_reconcile_live_reads_total") == 1


def test_an_invalid_max_failures_is_left_out():
    jobs = JobMetrics()
    jobs.observe("ml", "a", {"failurePolicy": {"maxFailures": "lots"}}, {})
    assert "tuneop_tuningjob_max_failures" not in {
        n for n, series in _group_from(jobs).items() if series
    }


def test_leadership_follows_kopfs_own_peering_decisions():
    """kopf's real peering code, fed a peering object with a higher-priority live peer,
    pauses this replica; once that peer is gone it resumes. The leader gauge follows."""
    from kopf._cogs.aiokits import aiotoggles
    from kopf._cogs.configs import configuration
    from kopf._cogs.structs import references
    from kopf._core.engines import peering

    jobs = JobMetrics()
    handler = metrics.PeeringLeadership(jobs)
    logger = logging.getLogger(metrics.PEERING_LOGGER)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    settings = configuration.OperatorSettings()
    settings.peering.name = "tuneop"
    settings.peering.priority = 0
    resource = references.Resource("kopf.dev", "v1", "clusterkopfpeerings")
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat()

    def event(status: dict) -> dict:
        return {"type": "MODIFIED", "object": {"metadata": {"name": "tuneop"}, "status": status}}

    async def scenario(paused: bool = False) -> list[bool]:
        conflicts = aiotoggles.Toggle(paused)
        pressure = asyncio.Event()
        pressure.set()  # a newer peering event is waiting: no sleep, no keep-alive PATCH
        seen = []
        for status in (
            {"other@1": {"priority": 10, "lifetime": 60, "lastseen": now}},
            {},
        ):
            await peering.process_peering_event(
                raw_event=event(status),
                namespace=None,
                resource=resource,
                identity=peering.Identity("me@1"),
                settings=settings,
                autoclean=False,
                stream_pressure=pressure,
                conflicts_found=conflicts,
            )
            seen.append(jobs.leader)
        return seen

    try:
        assert jobs.leader
        assert asyncio.run(scenario()) == [False, True]
        # a named peering starts paused (kopf: mandatory, the toggle preactivated): a
        # replica that joins behind a live leader logs nothing and must read 0 from the
        # start, as follow_peering sets it
        logger.removeHandler(handler)
        handler = metrics.follow_peering(jobs)
        assert not jobs.leader
        assert asyncio.run(scenario(paused=True)) == [False, True]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def test_the_trainer_names_are_what_the_trainer_exports():
    from tuneop_trainer.report.progress import Metrics

    exported = {
        sample.name
        for family in text_string_to_metric_families(generate_latest(Metrics().registry).decode())
        for sample in family.samples
    }
    assert exported >= TRAINER, TRAINER - exported


def test_running_trials_of_a_parallel_job():
    from tuneop.run.metrics import snapshot

    states = {"oracle": "Running", "t0": "Running", "t1": "Restarting", "t2": "Running"}
    groups = [{"name": name, "state": state} for name, state in states.items()]
    values = snapshot({"parallelTrials": 3}, {"phase": "Running", "groups": groups})
    assert values["tuneop_tuningjob_running_trials"] == 2
    assert values["tuneop_tuningjob_parallel_trials"] == 3
    sequential = snapshot({}, {"phase": "Running"})
    assert sequential["tuneop_tuningjob_running_trials"] == 1
    assert sequential["tuneop_tuningjob_parallel_trials"] == 1


def test_goodput_series_and_the_recovery_histogram():
    jobs = JobMetrics()
    goodput = {"allocatedGpuSeconds": 100.0, "lostGpuSeconds": 4.0, "percent": 96.0}
    jobs.observe("ns", "j", {}, {"phase": "Running", "goodput": goodput})
    jobs.recovered("EvictionByEvictionAPI", 12.5)
    jobs.recovered("EvictionByEvictionAPI", 45.0)
    samples = _group_from(jobs)
    assert samples["tuneop_tuningjob_goodput_percent"][0].value == 96.0
    assert samples["tuneop_tuningjob_lost_gpu_seconds_total"][0].value == 4.0
    buckets = {s.labels["le"]: s.value for s in samples["tuneop_recovery_seconds_bucket"]}
    assert buckets["10.0"] == 0 and buckets["20.0"] == 1 and buckets["60.0"] == 2
    assert buckets["+Inf"] == 2
    assert samples["tuneop_recovery_seconds_sum"][0].value == 57.5
    assert samples["tuneop_recovery_seconds_count"][0].labels["reason"] == "EvictionByEvictionAPI"


def test_checkpoint_cadence_series_only_when_the_trainer_reports_them():
    from tuneop.run.metrics import snapshot

    values = snapshot({}, {"phase": "Running", "progress": {"checkpointBytes": 10}})
    assert values["tuneop_tuningjob_checkpoint_interval_seconds"] is None
    assert values["tuneop_tuningjob_checkpoint_expected_waste_seconds_per_hour"] is None
    forged = snapshot({}, {"progress": {"checkpointIntervalSeconds": True}})
    assert forged["tuneop_tuningjob_checkpoint_interval_seconds"] is None
