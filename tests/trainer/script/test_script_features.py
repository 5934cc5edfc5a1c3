"""Script mode honours what users pass to search/fit, and resumes it exactly:
EarlyStopping stops a resumed trial at the same epoch, ReduceLROnPlateau keeps its
patience, a user callback keeps its state, a HyperModel.fit tunes the batch size,
class_weight, a two-input model (dict inputs), validation_split
(tests/trainer/scripts/features_search.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from trainer_helpers import (
    SCRIPTS,
    comparable,
    fit_final,
    fit_weights,
    kill_exec_when,
    results,
    start_exec,
    trial_fit,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_PREEMPTED

from tests.checkpoints import committed

SCRIPT = SCRIPTS / "features_search.py"

pytestmark = pytest.mark.slow


def _history(ckpt: Path, trial: str) -> dict[str, list[float]]:
    history: dict[str, list[float]] = fit_final(ckpt, trial_fit(trial))["history"]
    return history


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ckpt = tmp_path_factory.mktemp("ref") / "ckpt"
    proc = start_exec(SCRIPT, ckpt, ckpt.parent / "log")
    assert proc.wait(timeout=300) == EXIT_COMPLETED, (ckpt.parent / "log").read_text()[-3000:]
    return ckpt


def test_callbacks_act_in_an_uninterrupted_run(reference: Path) -> None:
    for trial in ("0", "1"):
        history = _history(reference, trial)
        epochs = len(history["loss"])
        assert 2 < epochs < 8, "EarlyStopping stops the trial before epochs=8"
        assert history["learning_rate"][-1] < history["learning_rate"][0], "LR reduced"
        assert history["seen_epochs"] == [float(i + 1) for i in range(epochs)]
    hps = [t["hyperparameters"] for t in results(reference)["trials"]]
    assert all(hp["batch_size"] in (8, 16) for hp in hps)
    assert results(reference)["objective"] == {"name": "val_loss", "direction": "min"}


def test_killed_mid_trial_resumes_callbacks_exactly(reference: Path, tmp_path: Path) -> None:
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    # After EarlyStopping and ReduceLROnPlateau have started counting (epoch index 1+),
    # with a checkpoint of the trial to restore.
    code = kill_exec_when(
        SCRIPT,
        ckpt,
        log,
        lambda p: (
            p.trial_id == "0" and p.epoch >= 1 and p.step >= 3 and committed(ckpt / trial_fit("0"))
        ),
    )
    assert code == -signal.SIGKILL
    code = kill_exec_when(
        SCRIPT,
        ckpt,
        log,
        lambda p: p.trial_id == "1" and p.epoch >= 1 and p.step == 3,
        sig=signal.SIGTERM,
    )
    assert code == EXIT_PREEMPTED, log.read_text()[-3000:]
    assert "checkpointed at epoch" in log.read_text()  # SIGTERM: checkpoint at the step
    proc = start_exec(SCRIPT, ckpt, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]

    assert comparable(results(ckpt)) == comparable(results(reference))
    for trial in ("0", "1"):
        assert _history(ckpt, trial) == _history(reference, trial)
        fit = trial_fit(trial)
        assert fit_weights(ckpt, fit) == fit_weights(reference, fit)
    assert log.read_text().count("restored ckpt-") >= 2
