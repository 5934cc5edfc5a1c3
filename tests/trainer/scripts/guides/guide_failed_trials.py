"""Small faithful version of the KerasTuner guide "Handling failed trials in
KerasTuner".

Follows keras-team/keras-io guides/keras_tuner/failed_trials.py (Keras 3 version:
`import keras`, `num_params`). The guide's code is kept as written: three GridSearch
tuners with no directory/project_name (so all three share ./untitled_project, each with
overwrite=True), max_retries_per_trial=3, max_consecutive_failed_trials=8, a plain
ValueError (retried), then FailedTrialError (not retried), then FatalError (search
stops; the guide catches it and prints "The search is terminated.").

Changes: `epochs=10` -> `epochs=2` in the three searches; the grid is thinned by
changing only the steps (units_1 10..40 step 10 -> step 15 = {10, 25, 40}; units_2
10..30 step 10 -> step 20 = {10, 30}) so GridSearch runs 6 trials instead of 12 while
keeping the guide's pattern: the 1200-param limit still fails the last 3 grid points
(25x30, 40x10, 40x30), consecutively, fewer than 8. The data were already
random np.random.rand float64 arrays in the guide and are kept. Added only the
`_trials` helper, the `RESULT[...]` lines after each search and the final
`GUIDE_RESULT` print; the guide's prose strings are
dropped or shortened (no-op statements).
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
            "hp": t.hyperparameters.values,
        }
        for t in tuner.oracle.trials.values()
    ]


"""
## Tolerate failed trials
"""


def build_model(hp):
    # Define the 2 hyperparameters for the units in dense layers
    units_1 = hp.Int("units_1", 10, 40, step=15)
    units_2 = hp.Int("units_2", 10, 30, step=20)

    # Define the model
    model = keras.Sequential(
        [
            layers.Dense(units=units_1, input_shape=(20,)),
            layers.Dense(units=units_2),
            layers.Dense(units=1),
        ]
    )
    model.compile(loss="mse")

    # Raise an error when the model is too large
    num_params = model.count_params()
    if num_params > 1200:
        raise ValueError(f"Model too large! It contains {num_params} params.")
    return model


tuner = keras_tuner.GridSearch(
    hypermodel=build_model,
    objective="val_loss",
    overwrite=True,
    max_retries_per_trial=3,
    max_consecutive_failed_trials=8,
)

# Use random data to train the model.
tuner.search(
    x=np.random.rand(100, 20),
    y=np.random.rand(100, 1),
    validation_data=(
        np.random.rand(100, 20),
        np.random.rand(100, 1),
    ),
    epochs=2,
)

# Print the results.
tuner.results_summary()
RESULT["tolerate"] = _trials(tuner)

"""
## Mark a trial as failed
"""


def build_model(hp):
    # Define the 2 hyperparameters for the units in dense layers
    units_1 = hp.Int("units_1", 10, 40, step=15)
    units_2 = hp.Int("units_2", 10, 30, step=20)

    # Define the model
    model = keras.Sequential(
        [
            layers.Dense(units=units_1, input_shape=(20,)),
            layers.Dense(units=units_2),
            layers.Dense(units=1),
        ]
    )
    model.compile(loss="mse")

    # Raise an error when the model is too large
    num_params = model.count_params()
    if num_params > 1200:
        # When this error is raised, it skips the retries.
        raise keras_tuner.errors.FailedTrialError(
            f"Model too large! It contains {num_params} params."
        )
    return model


tuner = keras_tuner.GridSearch(
    hypermodel=build_model,
    objective="val_loss",
    overwrite=True,
    max_retries_per_trial=3,
    max_consecutive_failed_trials=8,
)

# Use random data to train the model.
tuner.search(
    x=np.random.rand(100, 20),
    y=np.random.rand(100, 1),
    validation_data=(
        np.random.rand(100, 20),
        np.random.rand(100, 1),
    ),
    epochs=2,
)

# Print the results.
tuner.results_summary()
RESULT["mark_failed"] = _trials(tuner)

"""
## Terminate the search programmatically
"""


def build_model(hp):
    # Define the 2 hyperparameters for the units in dense layers
    units_1 = hp.Int("units_1", 10, 40, step=15)
    units_2 = hp.Int("units_2", 10, 30, step=20)

    # Define the model
    model = keras.Sequential(
        [
            layers.Dense(units=units_1, input_shape=(20,)),
            layers.Dense(units=units_2),
            layers.Dense(units=1),
        ]
    )
    model.compile(loss="mse")

    # Raise an error when the model is too large
    num_params = model.count_params()
    if num_params > 1200:
        # When this error is raised, the search is terminated.
        raise keras_tuner.errors.FatalError(f"Model too large! It contains {num_params} params.")
    return model


tuner = keras_tuner.GridSearch(
    hypermodel=build_model,
    objective="val_loss",
    overwrite=True,
    max_retries_per_trial=3,
    max_consecutive_failed_trials=8,
)

try:
    # Use random data to train the model.
    tuner.search(
        x=np.random.rand(100, 20),
        y=np.random.rand(100, 1),
        validation_data=(
            np.random.rand(100, 20),
            np.random.rand(100, 1),
        ),
        epochs=2,
    )
except keras_tuner.errors.FatalError:
    print("The search is terminated.")
    RESULT["terminated"] = True
RESULT["terminate"] = _trials(tuner)

print("GUIDE_RESULT " + json.dumps(RESULT, sort_keys=True))
