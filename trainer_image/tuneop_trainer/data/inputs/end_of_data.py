"""Keras's end-of-data step, made deterministic.

When Keras finds the end of a `tf.data` input by running out (a pipeline of unknown
length, or fewer batches than `steps_per_epoch`), it runs one more train step whose
`get_next` fails. The step's data-independent updates (the optimizer's `iterations`
+1, every layer `SeedGenerator` one draw on) race with that failure: they are ready
at the step's start, and whether they ran before the abort depends on TensorFlow's
scheduling. Measured with plain Keras, the same seeds, 12 fits in one process each:
under MirroredStrategy on 2 logical CPUs (Dense, Dropout, Adam, a filtered pipeline,
4 epochs) the updates took effect every time, yet the fits ended with 3 different
sets of weights (10 / 1 / 1) - the abort leaves the next epoch's steps to differ in
the last digits; stopped after the last batch, 12 of 12 were identical, and with the
two updates applied by hand they were the 10 fits' weights. On one device the
updates took effect in every fit of one script (tests/trainer/scripts/
tfdata_keras_fit.py) and in none of another's.

So the trainer reads one batch ahead (stream.Stream), stops Keras's epoch after the
data's last batch (no failing step), and always applies the two updates here: the
same result in every run, and plain Keras's where its step applied them. A
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
    """Around one Keras fit over a tf.data stream: `begin` before its first step;
    `stop(steps)` at the data's last batch, the fit's `steps`-th."""

    def __init__(self) -> None:
        self.model: Any = None
        self.states: list[Any] = []
        self.before: list[np.ndarray] = []

    def begin(self, model: Any) -> None:
        self.model = model
        self.states = _seed_states(model)
        self.before = [np.asarray(s.numpy()) for s in self.states]

    def stop(self, steps: int) -> None:
        """Stop Keras after this batch (no failing step) and apply that step's usual
        updates: `iterations` +1, each SeedGenerator on by what one step drew."""
        with self.model.distribute_strategy.scope():
            self._apply(steps)
        self.model.stop_training = True

    def _apply(self, steps: int) -> None:
        self.model.optimizer.iterations.assign_add(1)
        if steps <= 0:
            return
        for state, before in zip(self.states, self.before, strict=True):
            now = np.asarray(state.numpy())
            drawn = (now.astype(np.int64) - before.astype(np.int64)) // steps
            state.assign((now.astype(np.int64) + drawn).astype(now.dtype))
