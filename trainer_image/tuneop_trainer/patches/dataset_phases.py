"""Every `tf.data.Dataset` and `keras.utils.PyDataset` is stamped with the phase of the
script it was made in, so a resumed process replays the iterations an uninterrupted one
made on it (data/inputs/iterations.py)."""

from __future__ import annotations

import keras
import tensorflow as tf

from ..data.inputs import iterations

_installed = [False]


def install() -> None:
    """Idempotent."""
    if _installed[0]:
        return
    _installed[0] = True
    for cls in (tf.data.Dataset, keras.utils.PyDataset):
        cls.__init__ = iterations.stamped_init(cls.__init__)  # type: ignore[misc]
