"""The EMG CNN from the user report that started tuneop, WITHOUT its strategy fix.

The report's fix wrapped `build` in `with strategy.scope():` using a global strategy.
Here `build` never mentions the strategy: the trainer's scope guard (scope.py) runs it
inside the scope, which is the point. Sizes are constructor arguments so tests can use
a tiny version (`TinyCNNHyperModel`); the defaults are the report's search space.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_tuner
from keras.layers import Conv2D, Dense, Dropout, Flatten, Input, MaxPooling2D
from keras.models import Model


class CNNHyperModel(keras_tuner.HyperModel):  # type: ignore[misc]
    def __init__(
        self,
        input_shape: list[int],
        output_shape: list[int],
        filter_base: tuple[int, int] = (5, 7),
        layers: tuple[int, int] = (3, 4),
        dense_units: tuple[int, int, int] = (80, 240, 30),
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.input_shape = input_shape
        self.output_shape = output_shape
        self.filter_base = filter_base
        self.layers = layers
        self.dense_units = dense_units
        self.dropout = dropout

    def build(self, hp: Any) -> Any:
        visible = Input(shape=(self.input_shape[0], self.input_shape[1], 1))
        n = hp.Int("filter_base_size", *self.filter_base)
        conv = Conv2D(2**n, kernel_size=(4, 4), activation="relu", padding="same")(visible)
        pool = MaxPooling2D(pool_size=(2, 2), strides=2, padding="valid")(conv)
        conv2 = Conv2D(2 ** (n + 1), kernel_size=(3, 3), activation="relu", padding="same")(pool)
        pool2 = MaxPooling2D(pool_size=(2, 2), strides=2, padding="valid")(conv2)
        conv3 = Conv2D(2 ** (n + 2), kernel_size=(2, 2), activation="relu", padding="same")(pool2)
        pool3 = MaxPooling2D(pool_size=(2, 2), strides=2, padding="valid")(conv3)
        hidden = Dropout(self.dropout)(Flatten()(pool3))
        num_layers = hp.Int("num_layers", *self.layers)
        lo, hi, step = self.dense_units
        units = [hp.Int(f"dense_units_{i}", lo, hi, step) for i in range(1, 5)]
        for i in range(num_layers):
            hidden = Dense(units=units[i], activation="relu")(hidden)
        output = Dense(units=self.output_shape[0], activation="softmax")(hidden)
        model = Model(inputs=visible, outputs=output)
        model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
        return model


class TinyCNNHyperModel(CNNHyperModel):
    """Same architecture, tiny sizes: 2..4 filters, 1..2 dense layers of 4..8 units."""

    def __init__(self, input_shape: list[int], output_shape: list[int]) -> None:
        super().__init__(
            input_shape, output_shape, filter_base=(1, 2), layers=(1, 2), dense_units=(4, 8, 4)
        )


def build_tiny_dense(hp: Any) -> Any:
    """A `build(hp)` function example (also used by tests): a tiny MLP on EMG windows."""
    model = keras.Sequential(
        [
            Input(shape=(16, 8, 1)),
            Flatten(),
            Dense(hp.Int("units", 4, 12, step=4), activation="relu"),
            Dropout(0.25),
            Dense(4, activation="softmax"),
        ]
    )
    lr = hp.Choice("learning_rate", [1e-2, 3e-3])
    model.compile(
        optimizer=keras.optimizers.Adam(lr), loss="categorical_crossentropy", metrics=["accuracy"]
    )
    return model
