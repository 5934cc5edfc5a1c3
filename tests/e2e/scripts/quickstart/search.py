"""A keras-tuner script as the keras.io "Getting started" guide has users write one: a
`build_model(hp)` function, RandomSearch, `search()` with validation data, then the best
model saved where the script runs. Its own argument, --epochs."""

import argparse

import keras
import keras_tuner
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()


def build_model(hp):
    model = keras.Sequential()
    model.add(keras.layers.Input((12,)))
    model.add(keras.layers.Dense(hp.Int("units", 8, 32, step=8), activation="relu"))
    if hp.Boolean("dropout"):
        model.add(keras.layers.Dropout(0.25))
    model.add(keras.layers.Dense(3, activation="softmax"))
    model.compile(
        optimizer=keras.optimizers.Adam(hp.Float("lr", 1e-4, 1e-2, sampling="log")),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


rng = np.random.default_rng(0)
x = rng.normal(size=(384, 12)).astype("float32")
y = np.argmax(x[:, :3], axis=1)
x_train, y_train, x_val, y_val = x[:288], y[:288], x[288:], y[288:]

tuner = keras_tuner.RandomSearch(
    build_model,
    objective="val_accuracy",
    max_trials=2,
    overwrite=True,
    directory="my_dir",
    project_name="quickstart",
)
tuner.search(x_train, y_train, epochs=args.epochs, validation_data=(x_val, y_val))
best = tuner.get_best_models(num_models=1)[0]
best.save("best_model.keras")
tuner.results_summary(1)
