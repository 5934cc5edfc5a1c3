"""Data sources (synthetic, .npz, a directory of .npy) and the termination message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tuneop_contract.spec import DataSpec, SpecError
from tuneop_trainer import exits
from tuneop_trainer.data import load, synthetic_emg


def test_synthetic_is_deterministic_and_shaped_for_the_cnn() -> None:
    x, y = synthetic_emg(20, seed=4)
    assert x.shape == (20, 16, 8, 1) and y.shape == (20, 4)
    assert np.array_equal(x, synthetic_emg(20, seed=4)[0])
    assert not np.array_equal(x, synthetic_emg(20, seed=5)[0])
    data = load(DataSpec(synthetic_samples=20, validation_split=0.25))
    assert (len(data.x), len(data.x_val)) == (15, 5)
    assert data.input_shape == [16, 8] and data.output_shape == [4]


def test_npz_file_and_npy_directory(tmp_path: Path) -> None:
    x, y = synthetic_emg(12)
    x3 = x[..., 0]  # (n, h, w) gets its channel axis added
    np.savez(tmp_path / "emg.npz", x=x3[:8], y=y[:8], x_val=x3[8:], y_val=y[8:])
    data = load(DataSpec(synthetic_samples=None, path=str(tmp_path / "emg.npz")))
    assert data.x.shape == (8, 16, 8, 1) and data.x_val.shape == (4, 16, 8, 1)
    npy = tmp_path / "npy"
    npy.mkdir()
    np.save(npy / "x.npy", x)
    np.save(npy / "y.npy", y)
    data = load(DataSpec(synthetic_samples=None, path=str(npy), validation_split=0.25))
    assert (len(data.x), len(data.x_val)) == (9, 3)
    np.save(tmp_path / "lonely.npy", x)
    with pytest.raises(SpecError, match=r"^spec.data.path: .* must hold x.npy and y.npy"):
        load(DataSpec(synthetic_samples=None, path=str(tmp_path)))


def keras_convention():
    x = np.zeros((10, 16, 8, 1), "float32")
    y = np.eye(4, dtype="float32")[np.arange(10) % 4]
    return (x[:8], y[:8]), (x[8:], y[8:])


def not_arrays():
    return (1, 2)


def test_loader_in_the_keras_datasets_convention(monkeypatch: pytest.MonkeyPatch) -> None:
    data = load(DataSpec(synthetic_samples=None, loader=f"{__name__}:keras_convention"))
    assert (len(data.x), len(data.x_val)) == (8, 2)
    with pytest.raises(SpecError, match=r"^spec.data.loader: .* returned a int as x; expected"):
        load(DataSpec(synthetic_samples=None, loader=f"{__name__}:not_arrays"))


def test_errors_go_to_the_termination_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    log.touch()  # the kubelet creates it; the trainer only writes when it exists
    monkeypatch.setattr(exits, "TERMINATION_MESSAGE_PATH", str(log))
    code = exits.fail(2, 'spec.tuner.algorithm: "Foo" is not one of\n Hyperband')
    assert code == 2
    assert log.read_text() == 'spec.tuner.algorithm: "Foo" is not one of Hyperband'
    assert capsys.readouterr().err == 'error: spec.tuner.algorithm: "Foo" is not one of Hyperband\n'
