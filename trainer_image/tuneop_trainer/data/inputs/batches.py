"""Array inputs as a stream of batches gathered by index, in both modes.

Handing Keras `x[order]` each epoch copies the whole training set every epoch (and Keras
converts that copy into a tensor once more); for a data set of a few GB that doubles or
triples the trainer's memory. Here Keras gets a `tf.data` pipeline whose Python source
gathers one batch at a time (`v[order[i:i + batch_size]]`) from the caller's arrays, so
only the epoch's index order (8 bytes a sample) and a few prefetched batches are extra.
The batches are the ones Keras would make from the arrays with `shuffle=False`: the
epoch's order, `batch_size` at a time, the last one partial, converted as Keras converts
arrays (floats to `floatx()`, one batch at a time: a float64 set is never copied whole).

Why tf.data over a `keras.utils.PyDataset`: the pipeline carries Keras's own sharding
option for arrays (`AutoShardPolicy.DATA`), so a multi-worker strategy splits every
global batch among the workers as it does for arrays, without a fallback warning each
epoch; and Keras does not call `__getitem__` twice more per epoch to infer the spec.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np


def keras_dtype(dtype: Any) -> np.dtype[Any]:
    """The dtype Keras's array adapter gives an array of `dtype`: floats other than
    `floatx()` (float64 from numpy, float16) become floatx; ints, bools and the rest stay
    (keras/src/trainers/data_adapters/array_slicing.py, "Normalize floats to floatx")."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" and dtype != np.dtype(keras.config.floatx()):
        return np.dtype(keras.config.floatx())
    return dtype


def as_keras(v: Any) -> Any:
    """`v` (a batch) converted as Keras converts array inputs (`keras_dtype`)."""
    target = keras_dtype(v.dtype)
    return v if v.dtype == target else np.asarray(v).astype(target)


def parts(x: Any, y: Any = None, sample_weight: Any = None) -> tuple[Any, ...]:
    """Keras's element (x,), (x, y) or (x, y, sample_weight), lists as tuples."""
    if y is None and sample_weight is not None:
        raise ValueError("sample_weight without y")
    element = (x,) if y is None else (x, y) if sample_weight is None else (x, y, sample_weight)
    return _tuples(element)


def _tuples(structure: Any) -> Any:
    if isinstance(structure, list | tuple):
        return tuple(_tuples(s) for s in structure)
    if isinstance(structure, dict):
        return {k: _tuples(v) for k, v in structure.items()}
    return structure


class Gathered:
    """One `tf.data` pipeline over `element` (from `parts`) for a whole fit: `epoch(order)`
    points it at the next epoch's sample order. Why one: a pipeline made per epoch keeps
    about 1.5 MB alive in TensorFlow each time (measured over 16 one-epoch fits), so a
    long fit would grow by that much every epoch."""

    def __init__(self, element: tuple[Any, ...], batch_size: int) -> None:
        self.element = element
        self.batch_size = batch_size
        self.order = np.arange(0, dtype=np.int64)
        self.dataset = _pipeline(element, lambda: self.order, batch_size)

    def epoch(self, order: np.ndarray) -> tuple[Any, int]:
        """The pipeline and its number of batches, for an epoch in `order`: Keras gets
        that count as `steps_per_epoch` (the pipeline's own cardinality is unknown)."""
        self.order = np.asarray(order, dtype=np.int64)
        return self.dataset, -(-len(self.order) // self.batch_size)


def gathered(element: tuple[Any, ...], order: np.ndarray, batch_size: int) -> Any:
    """A `tf.data.Dataset` of the batches of `element` in a fixed `order` (validation):
    each iteration yields the same batches; nothing is copied until a batch is asked."""
    import tensorflow as tf

    fixed = np.asarray(order, dtype=np.int64)
    count = -(-len(fixed) // batch_size)
    dataset = _pipeline(element, lambda: fixed, batch_size)
    return dataset.apply(tf.data.experimental.assert_cardinality(count))


def _pipeline(element: tuple[Any, ...], order: Any, batch_size: int) -> Any:
    """Batches of `element` in the order `order()` gives when an iteration starts."""
    import tensorflow as tf

    def spec(v: np.ndarray) -> Any:
        return tf.TensorSpec((None, *v.shape[1:]), tf.as_dtype(keras_dtype(v.dtype)))

    signature = keras.tree.map_structure(spec, element)

    def batches() -> Any:
        indices = order()
        for start in range(0, len(indices), batch_size):
            index = indices[start : start + batch_size]
            yield keras.tree.map_structure(lambda v, i=index: as_keras(v[i]), element)

    dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)
