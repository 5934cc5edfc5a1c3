# A small keras-tuner search whose model also says what it trained on: every sample
# carries its id through an Identity output, and two metrics report the sum of the ids
# and of their squares over the global batch of the step (all-reduced over the
# replicas: the same on any number of them). A callback appends one line per step -
# trial, epoch, step, the two sums - to steps.jsonl in the working directory. Sums
# of at most 8 ids below 96 are exact in float32.
import json

import keras
import keras_tuner
import numpy as np
from keras import ops

SAMPLES, BATCH = 96, 8
rng = np.random.default_rng(0)
features = rng.normal(size=(SAMPLES, 6)).astype("float32")
labels = np.eye(2, dtype="float32")[(features[:, :2].sum(axis=1) > 0).astype(int)]
ids = np.arange(SAMPLES, dtype="float32")[:, None]
val = rng.normal(size=(24, 6)).astype("float32")
val_labels = np.eye(2, dtype="float32")[(val[:, :2].sum(axis=1) > 0).astype(int)]
val_ids = np.zeros((24, 1), dtype="float32")


class GlobalBatchSum(keras.metrics.Metric):
    """The step's global-batch sum of f(id): each replica's part, all-reduced."""

    def __init__(self, power, name, **kwargs):
        super().__init__(name=name, **kwargs)
        self.power = power
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign(ops.sum(ops.power(ops.cast(y_true, "float32"), self.power)))

    def result(self):
        return ops.convert_to_tensor(self.total)


def build(hp):
    x_in = keras.Input((6,), name="features")
    id_in = keras.Input((1,), name="sample_id")
    hidden = keras.layers.Dense(hp.Int("units", 4, 16, step=4), activation="relu")(x_in)
    label = keras.layers.Dense(2, activation="softmax", name="label")(hidden)
    sample_id = keras.layers.Identity(name="id")(id_in)
    model = keras.Model({"features": x_in, "sample_id": id_in}, {"label": label, "id": sample_id})
    model.compile(
        optimizer=keras.optimizers.Adam(hp.Choice("lr", [1e-2, 3e-3])),
        loss={"label": "categorical_crossentropy", "id": "mse"},
        loss_weights={"label": 1.0, "id": 0.0},
        metrics={"label": ["accuracy"], "id": [GlobalBatchSum(1, "ids"), GlobalBatchSum(2, "sq")]},
    )
    return model


class StepLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        trial = next(iter(tuner.oracle.ongoing_trials.values())).trial_id
        line = {"trial": trial, "epoch": self.epoch, "step": batch}
        line.update(ids=float(logs["id_ids"]), sq=float(logs["id_sq"]))
        with open("steps.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")


tuner = keras_tuner.RandomSearch(
    build,
    objective=keras_tuner.Objective("val_label_accuracy", "max"),
    max_trials=3,
    seed=5,
    directory="elastic",
    project_name="search",
)
tuner.search(
    {"features": features, "sample_id": ids},
    {"label": labels, "id": ids},
    validation_data=({"features": val, "sample_id": val_ids}, {"label": val_labels, "id": val_ids}),
    epochs=3,
    batch_size=BATCH,
    callbacks=[StepLog()],
    verbose=0,
)
best = tuner.get_best_hyperparameters(1)[0]
print("best", best.values)
