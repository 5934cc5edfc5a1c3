"""A script's `keras.callbacks.TensorBoard` logs to the checkpoint volume
(engine/tensorboard.py: each step shown once after any number of preemptions)."""

from __future__ import annotations

import keras

from ..engine import tensorboard

_installed = [False]


def install() -> None:
    """Idempotent."""
    if _installed[0]:
        return
    keras.callbacks.TensorBoard.__init__ = tensorboard.linked_init(
        keras.callbacks.TensorBoard.__init__
    )
    _installed[0] = True
