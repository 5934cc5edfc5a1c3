"""A `fit`'s training input, one module per kind behind one interface (`FitInput`).

The engine runs a fit as one Keras `fit` per epoch (fit.py); what it needs from the input
is the same for every kind: how many batches an epoch has, the Keras arguments that train
batches [start, steps) of epoch e, what identifies the data in the fit's fingerprint, how
to build the model from it before training, and how to put the input back where a
checkpoint left it. Each kind owns its position and its replay:

- arrays.py: numpy arrays and structures of them, memory-mapped shards too; the order of
  every epoch is a function of (fit seed, epoch), batches gathered one at a time;
- tf_data.py: a `tf.data.Dataset`, iterated by the trainer as Keras would, its iterators
  counted across fits and replayed on resume (stream.py, iterations.py, end_of_data.py);
- py_dataset.py: a `keras.utils.PyDataset` of known length, its batches picked by the
  trainer and its epoch hooks replayed;
- generators.py: everything else (generators, infinite PyDatasets), resumed at the start
  of the interrupted epoch.

`of(...)` picks the kind, as Keras's `get_data_adapter` does.
"""

from __future__ import annotations

from .arrays import ArrayInput, is_arrays
from .base import FitContext, FitInput, UnsupportedFit
from .generators import GeneratorInput
from .py_dataset import PyDatasetInput, indexable
from .tf_data import DatasetInput

__all__ = ["FitContext", "FitInput", "UnsupportedFit", "of"]


def of(ctx: FitContext) -> FitInput:
    """The input of the fit whose arguments `ctx.args` holds."""
    a = ctx.args
    x, y, sw = a["x"], a["y"], a["sample_weight"]
    if x is not None and is_arrays(x) and is_arrays(y) and is_arrays(sw):
        return ArrayInput(ctx)
    if a["validation_split"] and a["validation_data"] is None:
        raise UnsupportedFit(
            f"{ctx.script}: fit(validation_split=...) needs array inputs "
            "(as in Keras); pass validation_data"
        )
    if indexable(x):
        spe = a["steps_per_epoch"]
        if not spe or spe == x.num_batches:
            return PyDatasetInput(ctx)
        return GeneratorInput(ctx)
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        return DatasetInput(ctx)
    return GeneratorInput(ctx)
