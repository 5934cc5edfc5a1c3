"""Trials tied on the objective: a reloaded keras-tuner 1.4.8 oracle names the same best
trial as the one that ran them (the first created), whatever order the file system
lists the trial directories in (no training: seconds)."""

from __future__ import annotations

import glob
from pathlib import Path

import keras_tuner
from trainer_helpers import in_project
from tuneop_trainer.patches import keras_tuner_files

TRIALS = 12


def _oracle(root: Path) -> keras_tuner.Oracle:
    hp = keras_tuner.HyperParameters()
    hp.Int("units", 1, 1000)
    oracle = keras_tuner.oracles.RandomSearchOracle(
        objective=keras_tuner.Objective("val_accuracy", "max"),
        max_trials=TRIALS,
        hyperparameters=hp,
        seed=1,
    )
    return in_project(oracle, root)


def test_a_reloaded_oracle_breaks_ties_by_creation_order(tmp_path: Path) -> None:
    keras_tuner_files.install_atomic_json()
    keras_tuner_files.install_trial_order()
    ran = _oracle(tmp_path)
    for _ in range(TRIALS):
        trial = ran.create_trial("tuner0")
        ran.update_trial(trial.trial_id, {"val_accuracy": 0.25})
        trial.status = "COMPLETED"
        ran.end_trial(trial)
    ran.save()
    listed = [
        Path(p).parent.name for p in glob.glob(str(tmp_path / "p" / "trial_*" / "trial.json"))
    ]
    # the directory lists them in another order than they were created (hash order on
    # ext4): without the reordering the reloaded oracle would name another best trial
    assert listed != sorted(listed, key=lambda name: int(name.split("_")[1]))

    reloaded = _oracle(tmp_path)  # reloaded from the saved project
    assert list(reloaded.trials) == list(ran.trials)
    best = [t.trial_id for t in reloaded.get_best_trials(3)]
    assert best == [t.trial_id for t in ran.get_best_trials(3)] == ["00", "01", "02"]
