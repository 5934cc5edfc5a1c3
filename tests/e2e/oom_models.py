"""A hypermodel one of whose hyperparameter values needs more memory than the trainer pod
has: `ballast_mb` is memory the model holds while it trains (standing in for a layer too
wide for the pod). The trial that draws the largest value runs out."""

from __future__ import annotations

from typing import Any

import keras
import keras_tuner
import numpy as np

BALLAST_MB = [0, 4096, 1]
_held: list[np.ndarray] = []


class BallastHyperModel(keras_tuner.HyperModel):
    def __init__(self, input_shape: list[int], output_shape: list[int]) -> None:
        super().__init__()
        self.input_shape = tuple(input_shape)
        self.classes = int(output_shape[-1])

    def build(self, hp: Any) -> Any:
        megabytes = hp.Choice("ballast_mb", BALLAST_MB)
        _held.clear()
        _held.append(np.ones(megabytes << 20, dtype=np.uint8))  # written: resident
        model = keras.Sequential(
            [
                keras.Input(shape=self.input_shape),
                keras.layers.Flatten(),
                keras.layers.Dense(self.classes, activation="softmax"),
            ]
        )
        model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
        return model
