"""The benchmark's real-size model: an MLP of about 11 M parameters (state with Adam's
two slots ~ 132 MB), big enough that a checkpoint costs what it costs users."""

from __future__ import annotations

from typing import Any

import keras

WIDTHS = (4096, 2048, 1024)


def build(hp: Any) -> Any:
    lr = hp.Choice("lr", [1e-4])
    model = keras.Sequential(
        [
            keras.Input(shape=(16, 8, 1)),
            keras.layers.Flatten(),
            *(keras.layers.Dense(w, activation="relu") for w in WIDTHS),
            keras.layers.Dense(4, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(lr),
        loss="categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model
