"""Array inputs as a stream of batches gathered by index, in both modes.

Handing Keras `x[order]` each epoch copies the whole training set every epoch (and Keras
converts that copy into a tensor once more); for a data set of a few GB that doubles or
triples the trainer's memory. Here Keras gets a `tf.data` pipeline whose Python source
gathers one batch at a time (`v[order[i:i + batch_size]]`) from the caller's arrays, so
only the epoch's index order (8 bytes a sample) and a few prefetched batches are extra.
The batches are the ones Keras would make from the arrays with `shuffle=False`: the
epoch's order, `batch_size` at a time, the last one partial.

Why tf.data over a `keras.utils.PyDataset`: the pipeline carries Keras's own sharding
option for arrays (`AutoShardPolicy.DATA`), so a multi-worker strategy splits every
global batch among the workers as it does for arrays, without a fallback warning each
epoch; and Keras does not call `__getitem__` twice more per epoch to infer the spec.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np


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


def gathered(element: tuple[Any, ...], order: np.ndarray, batch_size: int) -> Any:
    """A `tf.data.Dataset` of the batches of `element` (from `parts`) taken in `order`.
    Each iteration yields the same batches; nothing is copied until a batch is asked."""
    import tensorflow as tf

    order = np.asarray(order, dtype=np.int64)
    count = -(-len(order) // batch_size)

    def spec(v: np.ndarray) -> Any:
        return tf.TensorSpec((None, *v.shape[1:]), tf.as_dtype(v.dtype))

    signature = keras.tree.map_structure(spec, element)

    def batches() -> Any:
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            yield keras.tree.map_structure(lambda v, i=index: v[i], element)

    dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)
