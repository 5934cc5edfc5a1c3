"""Small faithful version of the KerasTuner guide "Tailor the search space".

Follows keras-team/keras-io guides/keras_tuner/tailor_the_search_space.py (Keras 3
version: `import keras`, final `layers.Dense(units=10, activation="softmax")`). The
guide's code is kept as written: four RandomSearch tuners in one script, all with
overwrite=True and directory="my_dir" (projects "search_a_few", "fix_a_few",
"override_compile", "helloworld"): a HyperParameters with one Float and
tune_new_entries=False; a Fixed learning rate with tune_new_entries=True; compile
arguments overridden through the tuner (optimizer=Adam(1e-3) instance, loss="mse",
metrics=["sparse_categorical_crossentropy"], objective="val_loss") followed by
`tuner.get_best_models()[0].loss`; and HyperXception with only `learning_rate` tuned and
the loss overridden to sparse_categorical_crossentropy. The data are the guide's own
np.random draws (float64 images, int64 labels of shape (n, 1)).

Changes: the random images shrink from 28x28x1 to 16x16x1 (the guide's Flatten/Dense
model and HyperXception, now input_shape=(16, 16, 1), still build), train/val sample
counts 100/20 -> 64/16, and the HyperXception tuner's max_trials 3 -> 2. Added only the
`_trials` helper, the `RESULT[...]` lines (one captures the `.loss` value the guide only
displays) and the final `GUIDE_RESULT` print; the guide's prose strings are dropped or
shortened (no-op statements).
"""

import json

import keras
import keras_tuner
import numpy as np
from keras import layers

RESULT = {}


def _trials(tuner):
    return [
        {
            "id": t.trial_id,
            "status": t.status,
            "score": None if t.score is None else float(t.score),
        }
        for t in tuner.oracle.trials.values()
    ]


def build_model(hp):
    model = keras.Sequential()
    model.add(layers.Flatten())
    model.add(layers.Dense(units=hp.Int("units", min_value=32, max_value=128, step=32, default=64)))
    if hp.Boolean("dropout"):
        model.add(layers.Dropout(rate=0.25))
    model.add(layers.Dense(units=10, activation="softmax"))
    model.compile(
        optimizer=keras.optimizers.Adam(
            learning_rate=hp.Choice("learning_rate", values=[1e-2, 1e-3, 1e-4])
        ),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


"""
## Search a few and fix the rest
"""

hp = keras_tuner.HyperParameters()

# This will override the `learning_rate` parameter with your
# own selection of choices
hp.Float("learning_rate", min_value=1e-4, max_value=1e-2, sampling="log")

tuner = keras_tuner.RandomSearch(
    hypermodel=build_model,
    hyperparameters=hp,
    # Prevents unlisted parameters from being tuned
    tune_new_entries=False,
    objective="val_accuracy",
    max_trials=3,
    overwrite=True,
    directory="my_dir",
    project_name="search_a_few",
)

# Generate random data
x_train = np.random.rand(64, 16, 16, 1)
y_train = np.random.randint(0, 10, (64, 1))
x_val = np.random.rand(16, 16, 16, 1)
y_val = np.random.randint(0, 10, (16, 1))

# Run the search
tuner.search(x_train, y_train, epochs=1, validation_data=(x_val, y_val))
RESULT["search_a_few"] = _trials(tuner)

tuner.search_space_summary()

"""
## Fix a few and tune the rest
"""

hp = keras_tuner.HyperParameters()
hp.Fixed("learning_rate", value=1e-4)

tuner = keras_tuner.RandomSearch(
    build_model,
    hyperparameters=hp,
    tune_new_entries=True,
    objective="val_accuracy",
    max_trials=3,
    overwrite=True,
    directory="my_dir",
    project_name="fix_a_few",
)

tuner.search(x_train, y_train, epochs=1, validation_data=(x_val, y_val))
RESULT["fix_a_few"] = _trials(tuner)

tuner.search_space_summary()

"""
## Overriding compilation arguments
"""

tuner = keras_tuner.RandomSearch(
    build_model,
    optimizer=keras.optimizers.Adam(1e-3),
    loss="mse",
    metrics=[
        "sparse_categorical_crossentropy",
    ],
    objective="val_loss",
    max_trials=3,
    overwrite=True,
    directory="my_dir",
    project_name="override_compile",
)

tuner.search(x_train, y_train, epochs=1, validation_data=(x_val, y_val))
RESULT["override_compile"] = _trials(tuner)

"""
If you get the best model, you can see the loss function has changed to MSE.
"""

RESULT["override_compile_best_loss"] = tuner.get_best_models()[0].loss

"""
## Tailor the search space of pre-build HyperModels
"""

hypermodel = keras_tuner.applications.HyperXception(input_shape=(16, 16, 1), classes=10)

hp = keras_tuner.HyperParameters()

# This will override the `learning_rate` parameter with your
# own selection of choices
hp.Choice("learning_rate", values=[1e-2, 1e-3, 1e-4])

tuner = keras_tuner.RandomSearch(
    hypermodel,
    hyperparameters=hp,
    # Prevents unlisted parameters from being tuned
    tune_new_entries=False,
    # Override the loss.
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
    objective="val_accuracy",
    max_trials=2,
    overwrite=True,
    directory="my_dir",
    project_name="helloworld",
)

# Run the search
tuner.search(x_train, y_train, epochs=1, validation_data=(x_val, y_val))
tuner.search_space_summary()
RESULT["helloworld"] = _trials(tuner)

print("GUIDE_RESULT " + json.dumps(RESULT, sort_keys=True))
