"""User code for the trainer tests, imported by the trainer through `spec.pythonPath`
(this directory), the way a user's code on the volume would be."""

from __future__ import annotations

from typing import Any

import keras
import keras_tuner
import numpy as np


def _tiny(metrics: list[str]) -> Any:
    model = keras.Sequential(
        [keras.Input(shape=(16, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(4, "softmax")]
    )
    model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=metrics)
    return model


class BuiltOutsideScope(keras_tuner.HyperModel):  # type: ignore[misc]
    """Creates its model in __init__ (so outside any strategy scope): the scope guard
    must reject it with a message saying what to change."""

    def __init__(self) -> None:
        super().__init__()
        self.model = _tiny(["accuracy"])

    def build(self, hp: Any) -> Any:
        hp.Int("unused", 1, 2)
        return self.model


def build_uncompiled(hp: Any) -> Any:
    """Forgets model.compile: spec mode has no loss or optimizer to train it with."""
    hp.Int("unused", 1, 2)
    return keras.Sequential([keras.Input(shape=(16, 8, 1)), keras.layers.Flatten()])


def build_without_accuracy(hp: Any) -> Any:
    """Reports only loss: an objective of val_accuracy is not produced."""
    hp.Int("unused", 1, 2)
    return _tiny([])


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from tuneop_trainer.data import synthetic_emg

    x, y = synthetic_emg(48, seed=5)
    return x[:32], y[:32], x[32:], y[32:]


def build_linear(hp: Any) -> Any:
    """The smallest model over the EMG windows: training costs little next to the data."""
    hp.Int("unused", 1, 2)
    return _tiny(["accuracy"])


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def load_large() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """MEMORY_MB (default 320) of EMG-shaped windows; writes the process's RSS once they
    exist to MEMORY_OUT, the baseline a per-epoch copy of the set would add to."""
    import json
    import os

    samples = int(float(os.environ.get("MEMORY_MB", "320")) * 2**20) // (16 * 8 * 4)
    x = np.random.default_rng(0).standard_normal((samples, 16, 8, 1), dtype=np.float32)
    y = np.eye(4, dtype=np.float32)[(x[:, 0, 0, 0] > 0).astype(int)]
    n_val = 4096
    out = {"dataMB": x.nbytes / 2**20, "loadedMB": rss_mb()}
    with open(os.environ["MEMORY_OUT"], "w") as f:
        json.dump(out, f)
    return x[:-n_val], y[:-n_val], x[-n_val:], y[-n_val:]
