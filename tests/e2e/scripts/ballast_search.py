"""A plain keras-tuner script one of whose hyperparameter values needs more memory than
its pod has: `ballast_mb` is memory the model holds while it trains (standing in for a
layer too wide for the pod). RandomSearch draws each value once; the trial that draws
the largest runs out of memory."""

import keras
import keras_tuner
import numpy as np

rng = np.random.default_rng(3)
x = rng.normal(size=(80, 8)).astype("float32")
y = keras.utils.to_categorical(rng.integers(0, 2, size=80), 2).astype("float32")
held = []


def build(hp):
    megabytes = hp.Choice("ballast_mb", [0, 3072, 1])
    held.clear()
    held.append(np.ones(megabytes << 20, dtype=np.uint8))  # written: resident
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    return model


tuner = keras_tuner.RandomSearch(
    build, objective="val_accuracy", max_trials=3, seed=7, directory="kt", project_name="b"
)
tuner.search(x, y, epochs=1, batch_size=8, validation_split=0.2)
print("best hyperparameters:", tuner.get_best_hyperparameters(1)[0].values)
