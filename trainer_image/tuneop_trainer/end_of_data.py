"""Keras's end-of-data step, made deterministic.

When Keras finds the end of a `tf.data` input by running out (a pipeline of unknown
length, or fewer batches than `steps_per_epoch`), it runs one more train step whose
`get_next` fails. The step's data-independent updates usually take effect before the
failure aborts it - the optimizer's `iterations` +1 and every layer `SeedGenerator`
one step on - and the abort itself leaves the following steps to differ in the last
digits in some runs under MirroredStrategy. Measured with plain Keras (Dense, Dropout,
Adam, a pipeline of unknown length, 4 epochs on 2 logical CPUs, the same seeds, 12
fits in one process): 10 ended with one set of weights and 2 with two others; stopped
after the last batch instead, 12 of 12 were identical, and with the two updates
applied by hand they were the 10 runs' weights.

So the trainer reads one batch ahead (tfdata.Stream), stops Keras's epoch after the
data's last batch (no failing step), and applies the step's usual updates here. A
custom `train_step` that updates other state without reading the batch would, in
plain Keras, usually update it on that step too; that is not replayed.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _seed_states(model: Any) -> list[Any]:
    """Every replica's copy of every layer SeedGenerator's state (tf.Variables)."""
    states = []
    for layer in model._flatten_layers(include_self=True):
        for generator in getattr(layer, "_seed_generators", ()):
            variable = getattr(generator.state, "value", generator.state)
            states.extend(getattr(variable, "values", None) or [variable])
    return states


class SkippedStep:
    """Around one Keras fit that the trainer stops after the data's last batch:
    `begin` before its first step, `apply(steps)` after it trained `steps` batches."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.states: list[Any] = []
        self.before: list[np.ndarray] = []

    def begin(self) -> None:
        self.states = _seed_states(self.model)
        self.before = [np.asarray(s.numpy()) for s in self.states]

    def apply(self, steps: int) -> None:
        """The failing step's usual updates: `iterations` +1, and each SeedGenerator
        on by what one step of this fit drew from it."""
        self.model.optimizer.iterations.assign_add(1)
        if steps <= 0:
            return
        for state, before in zip(self.states, self.before, strict=True):
            now = np.asarray(state.numpy())
            drawn = (now.astype(np.int64) - before.astype(np.int64)) // steps
            state.assign((now.astype(np.int64) + drawn).astype(now.dtype))
