"""A `keras.utils.PyDataset` input, resumed at the checkpointed batch.

A PyDataset indexes its batches, so the trainer picks them itself: epoch e is the
batches `order(e)[start:]` - with `fit(shuffle=True)` (Keras's default) a permutation of
the batch indices seeded by the fit's identity and the epoch, where Keras would use the
unseeded `random.shuffle`; in index order with `shuffle=False`. Keras gets them through
`EpochBatches`, a PyDataset that forwards `__getitem__` and the worker settings to the
script's object.

What a PyDataset may change between epochs (a reshuffle in `on_epoch_end` with its own
seeded RNG, an augmentation schedule) is its own state, set by the sequence of hook
calls it received. The trainer makes that sequence itself, one `on_epoch_begin` before
and one `on_epoch_end` after every epoch (`EPOCH_HOOKS`; Keras's own calls, which
depend on how it splits the fit, do not reach the object), so a resumed process first
replays it once for every epoch an uninterrupted process would have trained on this
object before - in earlier fits too, counted like tf.data iterations - and the object
is then in the state it had. Exact when `__getitem__(i)` is a function of `i` and of
that state.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from . import iterations
from .base import FitContext
from .counted import CountedInput

# The hooks the trainer calls on the script's PyDataset for every epoch, in order.
EPOCH_HOOKS = ("on_epoch_begin", "on_epoch_end")


def indexable(x: Any) -> bool:
    """A PyDataset with a known number of batches (an infinite one has no epoch order)."""
    return isinstance(x, keras.utils.PyDataset) and x.num_batches is not None


def order(count: int, shuffle: Any, seed: int, epoch: int) -> np.ndarray:
    """The batch indices of `epoch`: a pure function of (fit seed, epoch)."""
    if shuffle:
        return np.random.default_rng([seed, epoch]).permutation(count)
    return np.arange(count)


def replay(dataset: Any, epochs: int) -> None:
    """The hook calls `epochs` one-epoch fits would have made on `dataset`."""
    for _ in range(epochs):
        for hook in EPOCH_HOOKS:
            getattr(dataset, hook)()


class EpochBatches(keras.utils.PyDataset):  # type: ignore[misc]
    """The batches `indices` of the script's PyDataset, in that order; Keras's epoch
    hooks stop here (the trainer calls the script's)."""

    def __init__(self, dataset: Any, indices: np.ndarray) -> None:
        super().__init__(
            workers=dataset.workers,
            use_multiprocessing=dataset.use_multiprocessing,
            max_queue_size=dataset.max_queue_size,
        )
        self.dataset = dataset
        self.indices = [int(i) for i in indices]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[self.indices[index]]

    def on_epoch_begin(self) -> None:
        pass

    def on_epoch_end(self) -> None:
        pass


class PyDatasetInput(CountedInput):
    kind = "pydataset"

    def __init__(self, ctx: FitContext) -> None:
        super().__init__(ctx)
        self.steps = int(ctx.args["steps_per_epoch"] or len(self.x))

    def key(self) -> str:
        cls = type(self.x)
        return f"pydataset:{cls.__module__}.{cls.__qualname__}:{len(self.x)}"

    def resume(self, meta: dict[str, Any]) -> None:
        super().resume(meta)
        if meta.get("done"):  # for the fits after it
            iterations.catch_up(self.x, self.made_by_done_fit(meta), lambda: replay(self.x, 1))

    def build_batch(self) -> Any:
        batch = self.x[0]  # a function of the index: reading it changes nothing
        return tuple(batch) if isinstance(batch, list | tuple) else (batch,)

    def epoch(self, epoch: int, start: int) -> dict[str, Any]:
        """Batches [start, steps) of `epoch`, after replaying the epoch hooks of the
        epochs an uninterrupted process had trained on the object by now."""
        target = self.base + (epoch - int(self.ctx.args["initial_epoch"]))
        iterations.catch_up(self.x, target, lambda: replay(self.x, 1))
        count = iterations.counter(self.x)
        count[0] += 1
        self.made = count[0]
        indices = order(self.steps, self.ctx.args["shuffle"], self.ctx.seed, epoch)
        self.x.on_epoch_begin()  # on_epoch_end: after the epoch's fit (end_epoch)
        return {"x": EpochBatches(self.x, indices[start:]), "shuffle": False}

    def end_epoch(self, trained: int) -> None:
        self.x.on_epoch_end()
