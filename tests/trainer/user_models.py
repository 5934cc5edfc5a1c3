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


def build_without_accuracy(hp: Any) -> Any:
    """Reports only loss: an objective of val_accuracy is not produced."""
    hp.Int("unused", 1, 2)
    return _tiny([])


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from tuneop_trainer.data import synthetic_emg

    x, y = synthetic_emg(48, seed=5)
    return x[:32], y[:32], x[32:], y[32:]
