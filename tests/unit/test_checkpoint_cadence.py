"""The checkpoint cadence (tuneop_trainer.checkpoint.cadence): the expected-waste formula, the
Young/Daly interval and its caps, the cost average, when a save is due, and the parsing
of `intervalSeconds` and TUNEOP_MTBF_SECONDS. Pure Python: no TensorFlow."""

from __future__ import annotations

import math

import pytest
import tuneop_contract as contract
from tuneop_contract.spec import Checkpoint, SpecError
from tuneop_trainer.checkpoint import cadence
from tuneop_trainer.checkpoint.cadence import Cadence, mtbf_from_env, optimal_interval
from tuneop_trainer.spec import parse

HOUR = 3600.0


def test_expected_waste_per_hour_is_saves_plus_half_an_interval_redone():
    # 1 s saves every 100 s: 1 % of the hour; disruptions every 10,000 s: 50 s redone
    # per disruption, 0.36 disruptions an hour
    assert contract.expected_waste_per_hour(100.0, 1.0, 10_000.0) == pytest.approx(36.0 + 18.0)
    assert contract.expected_waste_per_hour(60.0, 0.0, HOUR) == pytest.approx(30.0)


@pytest.mark.parametrize(("cost", "mtbf"), [(0.3, 4 * HOUR), (2.0, 6 * HOUR), (0.05, HOUR)])
def test_young_daly_interval_minimises_the_expected_waste(cost, mtbf):
    best = optimal_interval(cost, mtbf)
    assert best == pytest.approx(math.sqrt(2 * cost * mtbf))  # no cap applies here
    waste = contract.expected_waste_per_hour(best, cost, mtbf)
    for factor in (0.5, 0.8, 0.95, 1.05, 1.25, 2.0):
        assert contract.expected_waste_per_hour(best * factor, cost, mtbf) > waste


@pytest.mark.parametrize(
    ("cost", "mtbf", "expected"),
    [
        (1e-4, 4 * HOUR, cadence.MIN_INTERVAL_SECONDS),  # sqrt = 1.7 s
        (0.5, 1e9, cadence.MAX_INTERVAL_SECONDS),  # sqrt = 31,623 s
        (40.0, 4 * HOUR, 40.0 / cadence.OVERHEAD_BUDGET),  # sqrt = 1,073 s < 2,000 s
        (100.0, 1e9, 100.0 / cadence.OVERHEAD_BUDGET),  # the budget over the maximum
        (2.0, 12.0, 2.0 / cadence.OVERHEAD_BUDGET),  # and over M/2 (sqrt = 6.9 > M/2)
    ],
)
def test_caps(cost, mtbf, expected):
    assert optimal_interval(cost, mtbf) == pytest.approx(expected)
    # the budget holds whatever M says: a save never costs more than its share
    assert cost / optimal_interval(cost, mtbf) <= cadence.OVERHEAD_BUDGET + 1e-12


def test_mtbf_estimate_blends_the_prior_with_the_observed_rate():
    prior = contract.MTBF_PRIOR_SECONDS
    assert contract.mtbf_estimate(0, 0) == prior
    assert contract.mtbf_estimate(2 * HOUR, 0) == prior + 2 * HOUR  # no loss yet: grows
    assert contract.mtbf_estimate(2 * HOUR, 3) == pytest.approx((prior + 2 * HOUR) / 4)
    # many losses: the observed rate dominates
    assert contract.mtbf_estimate(100 * HOUR, 100) == pytest.approx((prior + 100 * HOUR) / 101)
    assert contract.mtbf_estimate(-5, -1) == prior  # nonsense counts as nothing


def auto(**fields: float) -> Cadence:
    return Cadence(Checkpoint(auto_interval=True), mtbf=fields.get("mtbf", 4 * HOUR))


def test_auto_starts_at_the_default_interval_and_adapts_to_the_measured_cost():
    c = auto(mtbf=4 * HOUR)
    assert c.interval == Checkpoint.interval_seconds and c.cost is None
    assert c.report() == {"mtbf_seconds": 4 * HOUR}  # no interval chosen yet
    c.blocked(0.1)
    assert c.interval == pytest.approx(math.sqrt(2 * 0.1 * 4 * HOUR))
    c.written(0.4)  # the writer's CPU time adds to the training thread's
    assert c.cost == pytest.approx(0.5)
    assert c.interval == pytest.approx(math.sqrt(2 * 0.5 * 4 * HOUR))  # 120 s
    report = c.report()
    assert report["checkpoint_cost_seconds"] == pytest.approx(0.5)
    assert report["checkpoint_interval_seconds"] == pytest.approx(120.0)
    assert report["expected_waste_seconds_per_hour"] == pytest.approx(
        contract.expected_waste_per_hour(120.0, 0.5, 4 * HOUR), abs=1e-3
    )
    # one slow save moves the average by COST_WEIGHT of the difference, not all the way
    c.blocked(1.1)
    assert c.cost == pytest.approx(0.1 + cadence.COST_WEIGHT * 1.0 + 0.4)


def test_auto_interval_grows_with_the_mtbf():
    short, long = auto(mtbf=HOUR), auto(mtbf=16 * HOUR)
    for c in (short, long):
        c.blocked(0.05)
        c.written(0.15)
    assert long.interval == pytest.approx(4 * short.interval)  # sqrt of 16


def test_due_auto_uses_the_interval_only():
    c = auto()
    assert not c.due(steps_since=10_000, seconds_since=59.0)  # intervalSteps is not used
    assert c.due(steps_since=0, seconds_since=60.0)


@pytest.mark.parametrize(
    ("steps", "seconds", "steps_since", "seconds_since", "due"),
    [
        (50, 60.0, 50, 1.0, True),
        (50, 60.0, 49, 59.9, False),
        (50, 60.0, 1, 60.0, True),
        (0, 60.0, 10_000, 59.0, False),  # steps off
        (3, 0.0, 2, 1e9, False),  # seconds off
        (0, 0.0, 10_000, 1e9, False),  # both off: epoch ends only
    ],
)
def test_due_fixed(steps, seconds, steps_since, seconds_since, due):
    c = Cadence(Checkpoint(interval_steps=steps, interval_seconds=seconds))
    assert c.due(steps_since, seconds_since) is due
    c.blocked(10.0)  # a fixed cadence never adapts, but reports the cost
    assert c.interval == seconds and c.due(steps_since, seconds_since) is due
    assert c.report() == {"checkpoint_cost_seconds": 10.0}


def test_writer_reports_its_cpu_seconds(tmp_path):
    import numpy as np
    from tuneop_trainer.checkpoint import BackgroundWriter, CheckpointStore

    done = []
    writer = BackgroundWriter(tmp_path, done.append)
    writer.submit(CheckpointStore(tmp_path / "s"), {"w": np.ones(1 << 20)}, {"epoch": 0, "step": 1})
    writer.wait()
    assert len(done) == 1 and 0 < done[0].cpu_seconds <= done[0].seconds + 0.05


@pytest.mark.parametrize(
    ("value", "auto_interval", "seconds"),
    [("auto", True, Checkpoint.interval_seconds), (30, False, 30.0), (0, False, 0.0)],
)
def test_spec_interval_seconds(value, auto_interval, seconds):
    cp = parse({"checkpoint": {"intervalSeconds": value}}).job.checkpoint
    assert (cp.auto_interval, cp.interval_seconds) == (auto_interval, seconds)


@pytest.mark.parametrize("value", ["fast", "Auto", "60", -1, True, [60]])
def test_spec_interval_seconds_rejects_other_values_naming_the_field(value):
    with pytest.raises(SpecError) as err:
        parse({"checkpoint": {"intervalSeconds": value}})
    message = str(err.value)
    assert message.startswith("spec.checkpoint.intervalSeconds: ")
    assert '"auto"' in message and "\n" not in message


def test_mtbf_from_env():
    assert mtbf_from_env({}) == contract.MTBF_PRIOR_SECONDS
    assert mtbf_from_env({contract.ENV_MTBF_SECONDS: "5400"}) == 5400.0
    for bad in ("soon", "0", "-3", "inf", "nan"):
        with pytest.raises(SpecError) as err:
            mtbf_from_env({contract.ENV_MTBF_SECONDS: bad})
        assert str(err.value).startswith(f"{contract.ENV_MTBF_SECONDS}: ")


def test_auto_stays_within_the_jobs_stall_timeout():
    spec = parse({"stallTimeoutSeconds": 45, "checkpoint": {"intervalSeconds": "auto"}})
    assert spec.job.checkpoint.max_interval_seconds == 45.0
    c = Cadence(spec.job.checkpoint, mtbf=1e9)
    assert c.interval == 45.0  # the start interval (60 s) is capped too
    c.blocked(0.5)  # sqrt(2 * 0.5 * 1e9) = 31,623 s
    assert c.interval == 45.0
    c.blocked(10.0)
    c.blocked(10.0)  # the overhead budget still wins: C / 0.02 > 45 s
    assert c.interval == pytest.approx(c.cost / cadence.OVERHEAD_BUDGET)
    with pytest.raises(SpecError, match=r"^spec.stallTimeoutSeconds: "):
        parse({"stallTimeoutSeconds": "long"})
