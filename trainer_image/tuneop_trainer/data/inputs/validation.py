"""The validation data of a fit, as the per-epoch Keras fits get it."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from . import batches, stream
from .arrays import DEFAULT_BATCH_SIZE, is_arrays, to_numpy


def validation_input(val: Any, args: dict[str, Any], batch_size: int | None, model: Any) -> Any:
    """Array validation data as gathered batches (batches.py), which Keras would
    otherwise convert again at every epoch's fit; other kinds as they are.
    `batch_size`: the training input's, which Keras's validation defaults to."""
    given = [part for part in val if part is not None] if isinstance(val, tuple | list) else []
    if not given or not is_arrays(given):  # (x, y, None): validation_split's, arrays too
        return stream.data_sharded(val, model.distribute_strategy)
    parts = [to_numpy(p) for p in keras.utils.unpack_x_y_sample_weight(tuple(val))]
    size = len(keras.tree.flatten(parts[0])[0])
    bs = args["validation_batch_size"] or batch_size
    return batches.gathered(batches.parts(*parts), np.arange(size), int(bs or DEFAULT_BATCH_SIZE))
