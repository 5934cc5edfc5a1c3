"""The chaos soak's alert invariant (bench/chaos/alerts.py): which alerts the soak's
faults explain, and the soak's prometheus, which finds the replicas through the targets
file it is given and evaluates the shipped rules on them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, start_http_server
from tuneop.run.metrics import JobMetrics

from bench.chaos import alerts
from tests.localcluster.controlplane import free_port


def facts(**status: object) -> alerts.JobFacts:
    seen = alerts.JobFacts()
    seen.observe(dict(status), 100.0)
    return seen


def test_only_what_the_soak_saw_of_a_job_explains_its_alert():
    stalled = facts(conditions=[{"type": "Stalled", "status": "True"}])
    assert alerts.allowed("TuneopJobStalled", stalled)
    assert not alerts.allowed(
        "TuneopJobStalled", facts(conditions=[{"type": "Stalled", "status": "False"}])
    )
    assert alerts.allowed("TuneopJobFailed", facts(phase="Failed"))
    assert not alerts.allowed("TuneopJobFailed", facts(phase="Succeeded"))
    assert not alerts.allowed("TuneopPreemptionStorm", facts(preemptions=5))
    assert alerts.allowed("TuneopPreemptionStorm", facts(preemptions=6))
    assert not alerts.allowed("TuneopOperatorDown", facts(phase="Failed", failures=9))
    assert not alerts.allowed("TuneopSomethingNew", facts(preemptions=9))
    assert not alerts.allowed("TuneopJobFailed", None)


def test_an_unexplained_alert_and_a_storm_that_never_fired_are_violations():
    calm, storm = alerts.JobFacts(), alerts.JobFacts()
    for now, count in ((0.0, 0), (10.0, 6), (50.0, 7)):
        calm.observe({"preemptions": min(count, 1)}, now)
        storm.observe({"preemptions": count}, now)
    seen = {"calm": calm, "storm": storm}
    fired = {("TuneopOperatorDown", ""): 300.0, ("TuneopJobStalled", "other-tests"): 5.0}
    found = alerts.check(fired, seen, {"calm", "storm"})
    assert [(v.namespace, v.detail.split()[0]) for v in found] == [
        ("", "TuneopOperatorDown"),
        ("storm", "TuneopPreemptionStorm"),
    ]
    fired = {("TuneopPreemptionStorm", "storm"): 55.0}
    assert alerts.check(fired, seen, {"calm", "storm"}) == []


def test_a_storm_is_counted_within_the_rules_hour():
    slow = alerts.JobFacts()
    for now, count in ((0.0, 0), (100.0, 3), (4000.0, 6), (4100.0, 6)):
        slow.observe({"preemptions": count}, now)
    assert slow.storm_since is None  # 3 within the hour before 4000 s
    fast = alerts.JobFacts()
    for now, count in ((0.0, 0), (100.0, 3), (200.0, 6)):
        fast.observe({"preemptions": count}, now)
    assert fast.storm_since == 200.0


@pytest.mark.slow
def test_the_soaks_prometheus_finds_a_replica_by_its_targets_and_evaluates_the_rules(
    promtool: str, tmp_path: Path
):
    """A replica (the operator's own collector on a port) named in the targets file
    after prometheus started: it is scraped, and a job whose preemptions go from 0 to 7
    within the window fires TuneopPreemptionStorm, which the poll records."""
    watch = alerts.Alerts(tmp_path, interval="1s")  # the soak's 5 s, shortened
    jobs = JobMetrics()
    jobs.observe("ml", "search", {}, {"phase": "Running", "preemptions": 0})
    registry = CollectorRegistry()
    registry.register(jobs)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        watch.targets([port])
        deadline = time.monotonic() + 60
        while watch.scrapes() < 1 and time.monotonic() < deadline:
            time.sleep(1)
        assert watch.scrapes() >= 1, watch.prometheus.log_path.read_text()[-2000:]
        jobs.observe("ml", "search", {}, {"phase": "Running", "preemptions": 7})
        key = ("TuneopPreemptionStorm", "ml")
        while key not in watch.fired and time.monotonic() < deadline:
            watch.poll(time.monotonic(), force=True)
            time.sleep(1)
        assert key in watch.fired, watch.fired
        assert ("TuneopOperatorDown", "") not in watch.fired
    finally:
        server.shutdown()
        thread.join(timeout=5)
        watch.stop()
