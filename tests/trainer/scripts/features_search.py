# A keras-tuner script using what users pass to search/fit: a two-input model, a
# HyperModel.fit override that tunes the batch size, class_weight, EarlyStopping and
# ReduceLROnPlateau (min_delta large, so both act within a few epochs), a user callback
# with its own state, validation_split.
import json
import sys

import keras
import keras_tuner
import numpy as np

rng = np.random.default_rng(1)
n = 192
labels = rng.integers(0, 3, size=n)
signal = rng.normal(size=(n, 6)).astype("float32") + labels[:, None]
extra = rng.normal(size=(n, 2)).astype("float32")
y = labels.astype("int32")


class CountEpochs(keras.callbacks.Callback):
    """A user callback whose state must survive a restart."""

    def __init__(self):
        super().__init__()
        self.seen = 0

    def on_epoch_end(self, epoch, logs=None):
        self.seen += 1
        logs["seen_epochs"] = float(self.seen)


class TwoInputs(keras_tuner.HyperModel):
    def build(self, hp):
        a = keras.Input(shape=(6,), name="signal")
        b = keras.Input(shape=(2,), name="extra")
        h = keras.layers.Concatenate()([a, b])
        h = keras.layers.Dense(hp.Int("units", 4, 12, step=4), activation="relu")(h)
        h = keras.layers.Dropout(0.2)(h)
        out = keras.layers.Dense(3, activation="softmax")(h)
        model = keras.Model([a, b], out)
        model.compile(
            optimizer=keras.optimizers.Adam(hp.Float("lr", 1e-3, 1e-2, sampling="log")),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
        return model

    def fit(self, hp, model, *args, **kwargs):
        return model.fit(*args, batch_size=hp.Choice("batch_size", [8, 16]), **kwargs)


tuner = keras_tuner.RandomSearch(
    TwoInputs(), objective="val_loss", max_trials=2, seed=5, directory="kt", overwrite=True
)
tuner.search(
    {"signal": signal, "extra": extra},
    y,
    epochs=8,
    validation_split=0.25,
    class_weight={0: 1.0, 1: 2.0, 2: 0.5},
    callbacks=[
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=2, min_delta=0.06),
        keras.callbacks.ReduceLROnPlateau(
            monitor="val_loss", patience=1, min_delta=0.1, factor=0.5
        ),
        CountEpochs(),
    ],
    verbose=0,
)
best = tuner.get_best_hyperparameters(1)[0]
print("best:", json.dumps(best.values, sort_keys=True))
sys.exit(0)
