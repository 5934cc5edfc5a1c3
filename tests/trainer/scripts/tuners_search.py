# keras-tuner's other tuners and a user subclass with its own run_trial, as users
# write them: `python tuners_search.py grid|bayesian|custom`.
import sys

import keras
import keras_tuner
import numpy as np

rng = np.random.default_rng(2)
x = rng.normal(size=(120, 5)).astype("float32")
y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32")
x_val, y_val = x[96:], y[96:]
x, y = x[:96], y[:96]


def build(hp):
    model = keras.Sequential(
        [
            keras.Input((5,)),
            keras.layers.Dense(hp.Choice("units", [4, 8]), activation="relu"),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(hp.Choice("lr", [0.05, 0.1])),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


class MyTuner(keras_tuner.RandomSearch):
    """The keras-tuner guide's pattern: build and fit in run_trial, return the score."""

    def run_trial(self, trial, x, y, validation_data, epochs):
        hp = trial.hyperparameters
        model = self.hypermodel.build(hp)
        model.fit(x, y, epochs=epochs, batch_size=hp.Choice("batch_size", [8, 16]), verbose=0)
        loss, accuracy = model.evaluate(*validation_data, verbose=0)
        return {"val_loss": loss, "val_accuracy": accuracy}


kind = sys.argv[1]
common = {"objective": "val_accuracy", "max_trials": 3, "seed": 3, "directory": "kt"}
if kind == "grid":
    tuner = keras_tuner.GridSearch(build, **common)
elif kind == "bayesian":
    tuner = keras_tuner.BayesianOptimization(build, num_initial_points=2, **common)
else:
    tuner = MyTuner(build, **common)
tuner.search(x, y, validation_data=(x_val, y_val), epochs=6)
print("best:", tuner.get_best_hyperparameters(1)[0].values)
