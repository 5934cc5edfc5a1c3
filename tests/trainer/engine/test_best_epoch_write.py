"""keras-tuner's best-epoch weights file as the engine writes it (both modes): written
to a temporary file, fsynced and renamed, so a node crash during the write - killed
between the write and the rename, or a torn temporary file left behind - leaves the
previous best epoch readable, and the next best epoch replaces it whole."""

from __future__ import annotations

import types
from pathlib import Path

import keras
import keras_tuner
import numpy as np
import pytest
import tuneop_contract
from keras_tuner.src.engine import tuner_utils
from tuneop_trainer.engine import runtime
from tuneop_trainer.patches import tuners


def _model(value: float) -> keras.Model:
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.set_weights([np.full((2, 1), value, np.float32), np.zeros(1, np.float32)])
    return model


def _read(path: Path) -> float:
    model = _model(0.0)
    model.load_weights(str(path))
    return float(model.get_weights()[0][0, 0])


class _Killed(BaseException):
    """The process dies here (a SIGKILL or a node crash)."""


def test_a_crash_during_a_best_epoch_write_leaves_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = tuner_utils.SaveBestEpoch._save_model
    monkeypatch.setattr(tuner_utils.SaveBestEpoch, "_save_model", original)  # undone after
    tuners._patch_save_best_epoch()
    monkeypatch.setattr(runtime, "_current", types.SimpleNamespace(write=True, root=tmp_path))
    path = tmp_path / "trial_0001" / "checkpoint.weights.h5"
    path.parent.mkdir()
    objective = keras_tuner.Objective("val_loss", "min")
    best = tuner_utils.SaveBestEpoch(objective=objective, filepath=str(path))

    best.set_model(_model(1.0))
    best._save_model()
    assert _read(path) == 1.0

    def killed(src: str, dst: str) -> None:  # between the write and the rename
        raise _Killed()

    monkeypatch.setattr(tuneop_contract.os, "replace", killed)
    best.set_model(_model(2.0))
    with pytest.raises(_Killed):
        best._save_model()
    monkeypatch.undo()  # os.replace back; the patched _save_model stays below
    monkeypatch.setattr(tuner_utils.SaveBestEpoch, "_save_model", original)
    tuners._patch_save_best_epoch()
    monkeypatch.setattr(runtime, "_current", types.SimpleNamespace(write=True, root=tmp_path))
    assert _read(path) == 1.0
    # torn writes a killed process leaves behind (this and the earlier naming)
    for name in (f".{path.name}.k1ll3d.tmp", f".tmp-99999-{path.name}"):
        (path.parent / name).write_bytes(path.read_bytes()[:100])
    assert _read(path) == 1.0

    best.set_model(_model(3.0))
    best._save_model()
    assert _read(path) == 3.0
    assert list(path.parent.iterdir()) == [path]  # the torn files are gone too
