# A small keras-tuner script: RandomSearch, 3 trials of a dense classifier, a few epochs.
import keras
import keras_tuner
import numpy as np

rng = np.random.default_rng(2)
labels = rng.integers(0, 2, size=96)
x = rng.normal(size=(96, 4)).astype("float32") + labels[:, None]
y = labels.astype("int32")


def build(hp):
    model = keras.Sequential(
        [
            keras.Input(shape=(4,)),
            keras.layers.Dense(hp.Int("units", 4, 16, step=4), activation="relu"),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(hp.Float("lr", 1e-3, 1e-2, sampling="log")),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


tuner = keras_tuner.RandomSearch(build, objective="val_loss", max_trials=3, seed=4)
tuner.search(x, y, epochs=3, batch_size=8, validation_split=0.25)
