# keras-tuner's documented behaviour that script mode's patches touch, in one script:
# reload of a project, overwrite=True, run_trial's return values, failed and invalid
# trials with retries, results_summary and get_best_models. Prints one JSON line
# (PROMISES ...) of what it observed; every trial start is appended to runs.log.
import contextlib
import io
import json

import keras
import keras_tuner
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((48, 4))  # float64, as numpy gives
y = (x.sum(axis=1) > 2).astype("int64")
FIT = {"epochs": 2, "validation_split": 0.25, "verbose": 0, "batch_size": 8}


def build(hp):
    model = keras.Sequential(
        [
            keras.Input(shape=(4,)),
            keras.layers.Dense(hp.Int("units", 2, 8, step=2), activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    return model


class Logged(keras_tuner.RandomSearch):
    def run_trial(self, trial, *args, **kwargs):
        with open("runs.log", "a") as log:
            log.write(f"{self.project_name} {trial.trial_id}\n")
        return super().run_trial(trial, *args, **kwargs)


def tuner(cls=Logged, **kwargs):
    settings = {"objective": "val_loss", "max_trials": 2, "seed": 1, "directory": "kt"}
    settings.update(kwargs)
    return cls(build, **settings)


def trials(t):
    return [(i, t.oracle.trials[i].status) for i in sorted(t.oracle.trials)]


out = {}
first = tuner(project_name="p")
first.search(x, y, **FIT)
out["first"] = trials(first)

again = tuner(project_name="p")  # overwrite=False: reloads the finished search
out["reloaded_before_search"] = trials(again)
again.search(x, y, **FIT)  # nothing left to run
out["reloaded_after_search"] = trials(again)
out["reloaded_best_same"] = (
    again.get_best_hyperparameters()[0].values == first.get_best_hyperparameters()[0].values
)

fresh = tuner(project_name="p", overwrite=True, max_trials=3)  # starts afresh
out["overwritten_before_search"] = trials(fresh)
fresh.search(x, y, **FIT)
out["overwritten"] = trials(fresh)
best = fresh.get_best_models(num_models=1)[0]
out["best_model_predicts"] = list(best.predict(x[:2], verbose=0).shape)
summary = io.StringIO()
with contextlib.redirect_stdout(summary):
    fresh.results_summary(num_trials=1)
out["summary_names_project"] = "p" in summary.getvalue()


class Returns(keras_tuner.RandomSearch):
    """run_trial's documented return values: a float, a dict, a History."""

    def run_trial(self, trial, *args, **kwargs):
        histories = super().run_trial(trial, *args, **kwargs)
        kind = trial.hyperparameters.Choice("kind", ["float", "dict", "history"])
        history = histories[0] if isinstance(histories, list) else histories
        if kind == "float":
            return float(history.history["val_loss"][-1])
        if kind == "dict":
            return {"val_loss": float(history.history["val_loss"][-1])}
        return history


returns = tuner(Returns, project_name="returns", max_trials=4)
returns.search(x, y, **FIT)
out["returns"] = [
    (i, str(t.status), t.score is not None) for i, t in sorted(returns.oracle.trials.items())
]


class Flaky(keras_tuner.GridSearch):
    """Units 2: an invalid trial (a plain error, retried); units 4: failed at once."""

    def run_trial(self, trial, *args, **kwargs):
        units = trial.hyperparameters.get("units")
        if units == 2:
            raise ValueError("invalid for this test")
        if units == 4:
            raise keras_tuner.errors.FailedTrialError("failed for this test")
        return super().run_trial(trial, *args, **kwargs)


flaky = Flaky(
    build, objective="val_loss", directory="kt", project_name="flaky", max_retries_per_trial=1
)
flaky.search(x, y, **FIT)
out["flaky"] = [
    (t.hyperparameters.get("units"), str(t.status)) for _, t in sorted(flaky.oracle.trials.items())
]
print("PROMISES " + json.dumps(out, sort_keys=True))
