"""GridSearch resumed: a keras-tuner 1.4.8 GridSearchOracle reloaded from disk after a
kill at any point of the search hands out the same trials, in the same order, as one
that ran without interruption (plain keras-tuner raises KeyError or stops early). No
training: the oracle alone, seconds."""

from __future__ import annotations

import json
from pathlib import Path

import keras_tuner
import pytest
from trainer_helpers import in_project
from tuneop_trainer.patches import gridsearch, keras_tuner_files

GRID = {"units": [4, 8, 16], "rate": [0.1, 0.01], "depth": [1, 2]}  # 12 combinations


def _oracle(root: Path) -> keras_tuner.Oracle:
    keras_tuner_files.install_atomic_json()
    keras_tuner_files.install_trial_order()
    gridsearch.install()
    hp = keras_tuner.HyperParameters()
    for name, values in GRID.items():
        hp.Choice(name, values)
    oracle = keras_tuner.oracles.GridSearchOracle(
        objective=keras_tuner.Objective("loss", "min"), hyperparameters=hp, seed=1
    )
    return in_project(oracle, root)


def _walk(oracle: keras_tuner.Oracle, stop_after_create: int | None = None) -> list[dict]:
    """Run the search: each trial created, then ended with a score; stop (the kill)
    right after creating trial number `stop_after_create`, before it ends."""
    seen = []
    while True:
        trial = oracle.create_trial("tuner0")
        if trial.status == "STOPPED":
            return seen
        seen.append(dict(trial.hyperparameters.values))
        if stop_after_create is not None and len(seen) == stop_after_create + 1:
            return seen
        oracle.update_trial(trial.trial_id, {"loss": 1.0 / len(seen)})
        trial.status = "COMPLETED"
        oracle.end_trial(trial)


def test_uninterrupted_grid_is_walked_whole(tmp_path: Path) -> None:
    seen = _walk(_oracle(tmp_path))
    assert len(seen) == 12 and len({json.dumps(v, sort_keys=True) for v in seen}) == 12


@pytest.mark.parametrize("kill_at", [0, 1, 4, 11])
def test_a_grid_killed_mid_trial_resumes_in_order(tmp_path: Path, kill_at: int) -> None:
    reference = _walk(_oracle(tmp_path / "ref"))
    before = _walk(_oracle(tmp_path / "run"), stop_after_create=kill_at)
    after = _walk(_oracle(tmp_path / "run"))  # a new process: the interrupted trial first
    assert after[0] == before[-1]
    assert before[:-1] + after == reference


def test_a_state_saved_without_the_grid_fields_is_rebuilt(tmp_path: Path) -> None:
    reference = _walk(_oracle(tmp_path / "ref"))
    before = _walk(_oracle(tmp_path / "run"), stop_after_create=5)
    path = tmp_path / "run" / "p" / "oracle.json"
    state = json.loads(path.read_text())
    del state[gridsearch.ORDERED_KEY], state[gridsearch.QUEUE_KEY]  # as plain keras-tuner saves
    path.write_text(json.dumps(state))
    after = _walk(_oracle(tmp_path / "run"))
    assert before[:-1] + after == reference
