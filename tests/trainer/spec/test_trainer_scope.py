"""The scope guard matters: without it the report's CNN fails under MirroredStrategy."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from trainer_helpers import (
    SCRIPTS,
    env,
    kill_when,
    results,
    run,
    spec_fit,
    tiny_spec,
    write_spec,
)
from tuneop_contract import EXIT_COMPLETED

from tests.checkpoints import committed
from tests.forkserver import launch


@pytest.mark.slow
def test_plain_keras_tuner_building_outside_scope_raises_strategy_error(tmp_path: Path) -> None:
    """Regression: plain keras-tuner, custom run_trial calling hypermodel.build outside
    strategy.scope() (the EMG report's CNN without its fix) and training inside it →
    the Keras 3 strategy error. tuneop's trainer runs the same CNN fine (see the resume
    tests, which use it under MirroredStrategy with Hyperband and kills)."""
    log = tmp_path / "log"
    code = launch([str(SCRIPTS / "plain_keras_tuner_outside_scope.py")], env(), log).wait(
        timeout=300
    )
    out = log.read_text()
    assert code == 1, out[-3000:]
    assert "Mixing different tf.distribute.Strategy objects" in out or (
        "colocate_vars_with must only be passed a variable created in this" in out
    ), out[-3000:]


@pytest.mark.slow
@pytest.mark.devices(2)
def test_report_cnn_without_scope_runs_and_resumes_under_mirrored_hyperband(
    tmp_path: Path,
) -> None:
    """The report's CNNHyperModel itself (full search space, no strategy.scope() in
    build) under MirroredStrategy with Hyperband: killed mid-trial, resumed, finished."""
    manifest = tiny_spec()
    manifest["spec"]["hypermodel"] = "tuneop_trainer.examples.emg:CNNHyperModel"
    manifest["spec"]["data"]["synthetic"]["samples"] = 60
    manifest["spec"]["checkpoint"]["intervalSteps"] = 2
    spec = write_spec(tmp_path, manifest)
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    # SIGKILLed once trial 0001 has a checkpoint committed: the resume restores it
    code = kill_when(
        spec,
        ckpt,
        log,
        lambda p: p.trial_id == "0001" and p.step >= 2 and committed(ckpt / spec_fit("0001")),
    )
    assert code == -signal.SIGKILL
    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    assert "MirroredStrategy over 2 logical CPU devices, 2 replica(s)" in text
    assert "trial 0001 fit 0: restored ckpt-" in text
    res = results(ckpt)
    assert [t["status"] for t in res["trials"]] == ["COMPLETED"] * 5
    assert any(t["continuesTrial"] for t in res["trials"])  # a Hyperband promotion ran
    assert 5 <= res["best"]["hyperparameters"]["filter_base_size"] <= 7
