"""A plain keras-tuner search, as a user writes it: nothing in it knows about tuneop.

RandomSearch over a tiny CNN on synthetic EMG-like windows (16 time steps x 8
electrodes, 4 gestures), 3 trials of 2 epochs, 18 steps an epoch. Runs as is with
`python emg_search.py`; in a TuningJob (manifests/samples/tuningjob-script.yaml) the
tuneop trainer runs it unmodified, checkpoints it and resumes it after a preemption.
"""

import argparse

import keras
import keras_tuner
import numpy as np

SAMPLES, CLASSES = 384, 4

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

# Deterministic data: every class raises its own pattern over the 8 electrodes.
rng = np.random.default_rng(0)
labels = rng.integers(0, CLASSES, size=SAMPLES)
patterns = 0.3 * rng.normal(size=(CLASSES, 1, 8, 1))
x = (rng.normal(size=(SAMPLES, 16, 8, 1)) + patterns[labels]).astype("float32")
y = keras.utils.to_categorical(labels, CLASSES).astype("float32")


def build(hp):
    model = keras.Sequential(
        [
            keras.Input(shape=(16, 8, 1)),
            keras.layers.Conv2D(
                hp.Int("filters", 4, 16, step=4), 3, padding="same", activation="relu"
            ),
            keras.layers.Flatten(),
            keras.layers.Dense(hp.Int("units", 8, 32, step=8), activation="relu"),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(hp.Float("learning_rate", 1e-3, 1e-2, sampling="log")),
        loss="categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


tuner = keras_tuner.RandomSearch(
    build, objective="val_accuracy", max_trials=3, directory="kt", project_name="emg"
)
tuner.search(
    x,
    y,
    epochs=args.epochs,
    batch_size=16,
    validation_split=0.25,
    callbacks=[
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=2),
        # TensorBoard: a run per trial, with its hyperparameters (under tuneop kept on
        # the checkpoint volume; `hack/tensorboard.sh JOB` serves it)
        keras.callbacks.TensorBoard("logs"),
    ],
)
tuner.results_summary()
print("best hyperparameters:", tuner.get_best_hyperparameters(1)[0].values)
# Under tuneop the script runs in `outputs/` on the job's checkpoint claim: this file
# outlives the pod (`hack/fetch-results.sh JOB` copies it).
tuner.get_best_models(1)[0].save("best_model.keras")
