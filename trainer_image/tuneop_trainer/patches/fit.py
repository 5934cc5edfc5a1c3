"""`Model.fit` runs as the engine's resumable fit while a Runtime is installed
(engine/fit.py: checkpointed every few steps, resumed at the exact step)."""

from __future__ import annotations

from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

from ..engine import fit

_installed = [False]


def install() -> None:
    """Idempotent."""
    if _installed[0]:
        return
    _installed[0] = True
    TensorFlowTrainer.fit = fit.route(TensorFlowTrainer.fit)
