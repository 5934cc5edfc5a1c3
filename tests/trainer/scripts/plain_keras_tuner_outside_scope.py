"""Regression fixture (run as a subprocess by test_trainer_scope.py): plain keras-tuner
with a custom run_trial that calls hypermodel.build outside strategy.scope() and trains
inside it, as the original EMG report did. Prints the error type and message."""

from __future__ import annotations

import sys
import tempfile

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

import keras_tuner  # noqa: E402
from tuneop_trainer.data import synthetic_emg  # noqa: E402
from tuneop_trainer.examples.emg import TinyCNNHyperModel  # noqa: E402

strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
x, y = synthetic_emg(32)


class PlainTuner(keras_tuner.RandomSearch):  # type: ignore[misc]
    def run_trial(self, trial, *args, **kwargs):  # type: ignore[no-untyped-def]
        model = self.hypermodel.build(trial.hyperparameters)  # outside the scope
        with strategy.scope():
            history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
        return history.history["loss"][-1]


tuner = PlainTuner(
    hypermodel=TinyCNNHyperModel([16, 8], [4]),
    objective="loss",
    max_trials=1,
    directory=tempfile.mkdtemp(),
    max_consecutive_failed_trials=1,
)
try:
    tuner.search()
except Exception as exc:
    print(f"ERROR {type(exc).__name__}: {exc}")
    sys.exit(1)
print("NO ERROR")
