"""failed_trials.apply on a real keras-tuner 1.4.8 oracle reloaded from disk, as a
restarted trainer has it (no training: seconds)."""

from __future__ import annotations

import logging
from pathlib import Path

import keras_tuner
import pytest
from trainer_helpers import in_project
from tuneop_contract import ENV_FAILED_TRIALS
from tuneop_trainer import failed_trials


def _oracle(root: Path, **kwargs: object) -> keras_tuner.Oracle:
    hp = keras_tuner.HyperParameters()
    hp.Int("units", 1, 100)
    oracle = keras_tuner.oracles.RandomSearchOracle(
        objective="loss", max_trials=6, hyperparameters=hp, seed=1, **kwargs
    )
    return in_project(oracle, root)


def _killed_in_trial_1(root: Path) -> None:
    """Trial 0 completed, trial 1 RUNNING when the process died."""
    oracle = _oracle(root)
    first = oracle.create_trial("tuner0")
    oracle.update_trial(first.trial_id, {"loss": 0.5})
    first.status = "COMPLETED"
    oracle.end_trial(first)
    running = oracle.create_trial("tuner0")
    assert running.trial_id == "1" and running.status == "RUNNING"
    oracle.save()


def test_a_named_running_trial_is_ended_failed_and_never_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _killed_in_trial_1(tmp_path)
    oracle = _oracle(tmp_path)
    assert oracle._retry_queue == ["1"]  # keras-tuner alone would re-run it
    env = {ENV_FAILED_TRIALS: "1:OOMKilled,0:OOMKilled,42:OOMKilled"}
    with caplog.at_level(logging.INFO):
        assert failed_trials.apply(oracle, env) == ["1"]
    assert "trial 42 is not a trial of this search; ignored" in caplog.text
    trial = oracle.trials["1"]
    assert trial.status == "FAILED" and "out of memory" in trial.message
    assert oracle.trials["0"].status == "COMPLETED"  # ended before: untouched
    assert oracle._retry_queue == [] and oracle.end_order == ["0", "1"]
    assert oracle.create_trial("tuner0").trial_id == "2"  # the search goes on
    reloaded = _oracle(tmp_path)  # written to disk
    assert reloaded.trials["1"].status == "FAILED" and "1" not in reloaded._retry_queue
    assert failed_trials.apply(reloaded, env) == []  # idempotent
    assert reloaded.end_order.count("1") == 1


def test_nothing_named_changes_nothing(tmp_path: Path) -> None:
    _killed_in_trial_1(tmp_path)
    oracle = _oracle(tmp_path)
    assert failed_trials.apply(oracle, {}) == []
    assert failed_trials.apply(oracle, {ENV_FAILED_TRIALS: ""}) == []
    assert oracle._retry_queue == ["1"] and oracle.trials["1"].status == "RUNNING"


def test_keras_tuners_consecutive_failure_limit_holds_after_the_state_is_saved(
    tmp_path: Path,
) -> None:
    _killed_in_trial_1(tmp_path)
    oracle = _oracle(tmp_path, max_consecutive_failed_trials=1)
    with pytest.raises(RuntimeError, match="consecutive failures"):
        failed_trials.apply(oracle, {ENV_FAILED_TRIALS: "1:OOMKilled"})
    assert oracle.max_consecutive_failed_trials == 1
    reloaded = _oracle(tmp_path, max_consecutive_failed_trials=1)
    assert reloaded.trials["1"].status == "FAILED"  # saved before the check raised
