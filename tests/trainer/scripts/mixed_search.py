# Mixed precision set by the script, as the Keras guide does it:
# `python mixed_search.py mixed_bfloat16|mixed_float16`.
import sys

import keras
import keras_tuner
import numpy as np

keras.mixed_precision.set_global_policy(sys.argv[1])
rng = np.random.default_rng(0)
x = rng.normal(size=(160, 6)).astype("float32")
y = (x[:, 0] + x[:, 1] > 0).astype("int32")


class ComputeDtype(keras.callbacks.Callback):
    """Logs 1.0 while the model computes in a 16-bit type."""

    def on_epoch_end(self, epoch, logs=None):
        logs["compute_16bit"] = float(self.model.dtype_policy.compute_dtype != "float32")


def build(hp):
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(hp.Int("units", 4, 8, step=4), activation="relu"),
            keras.layers.Dropout(0.1),
            keras.layers.Dense(2, activation="softmax", dtype="float32"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


tuner = keras_tuner.RandomSearch(build, objective="val_loss", max_trials=2, seed=1, directory="kt")
tuner.search(
    x, y, validation_split=0.25, epochs=4, batch_size=8, callbacks=[ComputeDtype()], verbose=0
)
