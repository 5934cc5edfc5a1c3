"""An erroring reconcile loop is visible: per-job metrics of the last good pass and the
consecutive failures, and a liveness probe that fails once the whole operator is stuck
(every loop failing, no pass succeeding for the configured time) but not for one job."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest
import urllib3
from prometheus_client import CollectorRegistry, generate_latest
from tuneop.act import kube
from tuneop.run import handlers, health, metrics
from tuneop.run.config import Config

from tests.unit.fakes import Clock


class Runtime:
    """A pass raises while `failing` names the job (the API refusing it)."""

    def __init__(self) -> None:
        self.failing: set[str] = set()

    async def run_pass(self, namespace: str, name: str, logger: Any) -> None:
        if name in self.failing:
            raise kube.ApiError(503, "{}", "GET", f"/tuningjobs/{name}")


def run_pass(runtime: Runtime, loops: health.LoopHealth, name: str) -> int:
    errors, _ = asyncio.run(handlers._pass(runtime, "ns", name, None, 0, loops))  # type: ignore[arg-type]
    return errors


def test_one_failing_job_is_reported_but_the_operator_stays_live() -> None:
    clock, runtime = Clock(), Runtime()
    loops = health.LoopHealth(clock)
    runtime.failing = {"bad"}
    for _ in range(20):
        clock.now += 30
        assert run_pass(runtime, loops, "bad") == 1
        assert run_pass(runtime, loops, "good") == 0
    report = loops.check(unhealthy_after=300)
    assert report == {"loops": 2, "failing": {"ns/bad": 20}}


def test_every_loop_failing_long_enough_fails_the_probe() -> None:
    clock, runtime = Clock(), Runtime()
    loops = health.LoopHealth(clock)
    run_pass(runtime, loops, "a")
    run_pass(runtime, loops, "b")
    runtime.failing = {"a", "b"}
    clock.now += 299
    run_pass(runtime, loops, "a")
    run_pass(runtime, loops, "b")
    assert loops.check(unhealthy_after=300)["failing"] == {"ns/a": 1, "ns/b": 1}  # not yet
    clock.now += 2
    with pytest.raises(health.Unhealthy, match=r"for 301s and 2 job loop\(s\) are failing"):
        loops.check(unhealthy_after=300)
    runtime.failing = set()  # the API is back: one good pass mends it
    run_pass(runtime, loops, "a")
    assert loops.check(unhealthy_after=300)["failing"] == {"ns/b": 1}


def test_an_unreachable_api_server_is_one_log_line_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An API server restarting: the pass fails (counted, backing off) and says so in one
    line; a traceback is for what the operator does not expect."""

    class Restarting(Runtime):
        async def run_pass(self, namespace: str, name: str, logger: Any) -> None:
            raise urllib3.exceptions.ProtocolError(
                "Connection aborted.", ConnectionResetError("reset by peer")
            )

    loops = health.LoopHealth(Clock())
    with caplog.at_level("WARNING", logger="tuneop.run.handlers"):
        assert run_pass(Restarting(), loops, "a") == 1  # type: ignore[arg-type]
    (record,) = caplog.records
    assert "API server unreachable" in record.getMessage() and record.exc_info is None
    assert loops.check(unhealthy_after=300)["failing"] == {"ns/a": 1}


def test_a_loop_that_stopped_failing_is_dropped_not_exported_for_ever() -> None:
    """A job deleted while another replica led (it ran the clean-up): this replica's
    loop of it last failed and never passes again. After LOOP_STALE_SECONDS it is gone
    from the report and the metrics; a loop still failing every minute stays."""
    clock, runtime = Clock(), Runtime()
    loops = health.LoopHealth(clock)
    runtime.failing = {"gone", "broken"}
    run_pass(runtime, loops, "gone")
    for _ in range(6):
        clock.now += 60
        run_pass(runtime, loops, "broken")
    registry = CollectorRegistry()
    registry.register(metrics.LoopSeries(loops, metrics.JobMetrics()))
    text = generate_latest(registry).decode()
    assert 'tuningjob="broken"' in text and 'tuningjob="gone"' not in text
    assert loops.report()["failing"] == {"ns/broken": 6}


def test_a_deleted_job_is_forgotten() -> None:
    loops, runtime = health.LoopHealth(Clock()), Runtime()
    runtime.failing = {"gone"}
    run_pass(runtime, loops, "gone")
    loops.forget(("ns", "gone"))
    assert loops.report() == {"loops": 0, "failing": {}}


def test_the_metrics_give_each_jobs_last_good_pass_and_its_failures() -> None:
    clock, runtime = Clock(), Runtime()
    loops = health.LoopHealth(clock)
    jobs = metrics.JobMetrics()
    registry = CollectorRegistry()
    registry.register(metrics.LoopSeries(loops, jobs))
    run_pass(runtime, loops, "a")  # at 1000
    runtime.failing = {"a"}
    clock.now = 1_060.0
    run_pass(runtime, loops, "a")
    run_pass(runtime, loops, "a")
    runtime.failing = {"new"}
    run_pass(runtime, loops, "new")  # never succeeded: its loop's start
    text = generate_latest(registry).decode()
    stamp = "tuneop_tuningjob_last_reconcile_success_timestamp_seconds"
    assert f'{stamp}{{namespace="ns",tuningjob="a"}} 1000.0' in text
    assert f'{stamp}{{namespace="ns",tuningjob="new"}} 1060.0' in text
    errors = "tuneop_tuningjob_reconcile_consecutive_errors"
    assert f'{errors}{{namespace="ns",tuningjob="a"}} 2.0' in text
    jobs.set_leader(False)  # a standby exports no job series
    assert "tuningjob=" not in generate_latest(registry).decode()


def test_kopfs_probe_activity_fails_at_once_when_unhealthy(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's own probe activity (what its /healthz endpoint runs) with the registered
    handler: a report while healthy; ActivityError (the endpoint's 500) at once, not a
    retry loop inside the request, when every loop has been failing too long."""
    from kopf._core.actions import lifecycles
    from kopf._core.engines import activities, indexing
    from kopf._core.intents import causes

    clock = Clock()
    loops = health.LOOPS.__class__(clock)
    monkeypatch.setattr(health, "LOOPS", loops)
    memo = kopf.Memo(runtime=handlers.Runtime(Config.from_env({}), object()))  # type: ignore[arg-type]

    async def probe() -> Any:
        run = activities.run_activity(
            lifecycle=lifecycles.all_at_once,
            registry=kopf.get_default_registry(),
            settings=kopf.OperatorSettings(),
            activity=causes.Activity.PROBE,
            indices=indexing.OperatorIndexers().indices,
            memo=memo,
        )
        return await asyncio.wait_for(run, timeout=5)

    assert asyncio.run(probe()) == {"reconcile": {"loops": 0, "failing": {}}}
    loops.failed(("ns", "a"))
    clock.now += Config.unhealthy_after_seconds
    with pytest.raises(activities.ActivityError):
        asyncio.run(probe())
