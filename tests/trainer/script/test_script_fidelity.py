"""Script mode computes what the script computes without tuneop: the pieces, in process
(real Keras, keras-tuner and TensorFlow on the CPU)."""

from __future__ import annotations

import random

import keras
import keras_tuner
import numpy as np
import pytest
import tensorflow as tf
from tuneop_trainer import seeds
from tuneop_trainer.data.inputs import batches
from tuneop_trainer.engine import loops


def _draws() -> tuple[float, float, float, float]:
    gen = keras.random.uniform((1,))  # Keras's global SeedGenerator
    return (
        random.random(),
        float(np.random.rand()),
        float(tf.random.uniform((1,))[0]),
        float(gen[0]),
    )


def test_isolated_blocks_leave_the_script_streams_where_they_were() -> None:
    keras.utils.set_random_seed(11)
    _draws()  # the script has drawn already: its generators exist and have moved
    expected = _draws()
    keras.utils.set_random_seed(11)
    _draws()
    with seeds.isolated():
        keras.utils.set_random_seed(12345)  # the trainer's per-trial seeding
        _draws()
        keras.layers.Dense(3).build((None, 2))  # initializers draw too
    assert _draws() == expected


def _keras_batch(element: tuple) -> tuple:
    """The first batch Keras's own array adapter makes of `element`."""
    from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter

    adapter = ArrayDataAdapter(*element, batch_size=4, shuffle=False)
    return next(iter(adapter.get_tf_dataset()))


@pytest.mark.parametrize(
    "x, y",
    [
        (np.random.rand(8, 3), np.random.rand(8, 1)),  # float64, as np.random gives
        (np.ones((8, 3), np.float16), np.arange(8)),  # float16; int64 labels kept
        ({"a": np.random.rand(8, 2), "b": np.arange(8, dtype=np.int32)}, np.ones(8, bool)),
        (np.arange(24, dtype=np.uint8).reshape(8, 3), np.arange(8, dtype=np.int32)),
    ],
    ids=["float64", "float16-int64", "dict-int32-bool", "uint8"],
)
def test_array_batches_have_the_dtypes_keras_gives(x: object, y: object) -> None:
    element = batches.parts(x, y)
    pipeline, _ = batches.Gathered(element, 4).epoch(np.arange(8))
    ours = next(iter(pipeline))
    theirs = _keras_batch((x, y))
    got = keras.tree.map_structure(lambda t: t.dtype.name, ours)
    want = keras.tree.map_structure(lambda t: t.dtype.name, tuple(theirs))
    assert got == want
    assert all(
        np.array_equal(a.numpy(), b.numpy())
        for a, b in zip(keras.tree.flatten(ours), keras.tree.flatten(theirs), strict=True)
    )


class _ModelFitHyperModel(keras_tuner.HyperModel):  # type: ignore[misc]
    def fit(self, hp, model, *args, **kwargs):  # type: ignore[no-untyped-def]
        return model.fit(*args, batch_size=hp.Choice("batch_size", [8, 16]), **kwargs)


class _OwnLoopHyperModel(keras_tuner.HyperModel):  # type: ignore[misc]
    def fit(self, hp, model, x, y, **kwargs):  # type: ignore[no-untyped-def]
        optimizer = keras.optimizers.Adam()
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) - y)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return float(loss)


class _SuperRunTrial(keras_tuner.RandomSearch):  # type: ignore[misc]
    def run_trial(self, trial, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["batch_size"] = trial.hyperparameters.Choice("batch_size", [8, 16])
        return super().run_trial(trial, *args, **kwargs)


class _OwnRunTrial(keras_tuner.RandomSearch):  # type: ignore[misc]
    def run_trial(self, trial, x, y):  # type: ignore[no-untyped-def]
        model = self.hypermodel.build(trial.hyperparameters)
        return float(np.mean(model(x)))


def _tuner(cls: type, hypermodel: keras_tuner.HyperModel, tmp_path: object) -> object:
    tuner = cls.__new__(cls)  # only the types matter to loops.own_loop
    tuner.hypermodel = hypermodel
    return tuner


@pytest.mark.parametrize(
    "tuner_class, hypermodel, owner",
    [
        (keras_tuner.RandomSearch, keras_tuner.HyperModel(), None),
        (keras_tuner.RandomSearch, _ModelFitHyperModel(), None),
        (_SuperRunTrial, keras_tuner.HyperModel(), None),
        (keras_tuner.RandomSearch, _OwnLoopHyperModel(), "_OwnLoopHyperModel.fit"),
        (_OwnRunTrial, keras_tuner.HyperModel(), "_OwnRunTrial.run_trial"),
    ],
    ids=["default", "hypermodel-fit-calls-fit", "super-run-trial", "own-fit", "own-run-trial"],
)
def test_own_training_loops_are_told_from_model_fit(
    tuner_class: type, hypermodel: keras_tuner.HyperModel, owner: str | None, tmp_path: object
) -> None:
    where = loops.own_loop(_tuner(tuner_class, hypermodel, tmp_path))
    if owner is None:
        assert where is None
    else:
        assert where is not None and where.endswith(owner) and __file__ in where
