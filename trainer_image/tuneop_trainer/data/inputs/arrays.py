"""Numpy arrays (and lists/tuples/dicts of them, memory-mapped shards too), ordered by
the trainer.

Each epoch's order is a function of (fit seed, epoch): `shuffle=True` a permutation,
`"batch"` a permutation of whole batches, `False` the arrays' order. Keras gets the
epoch's remaining batches gathered one at a time (batches.py: no per-epoch copy of the
training set); they are the batches Keras makes (`batch_size`, default 32, the last one
partial). `validation_split` is Keras's own split (the tail, before shuffling), and
`steps_per_epoch` reads the epochs as a stream over passes through the data, as Keras
does. So a resumed fit sees the same batches in the same order as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import keras
import numpy as np

from ...checkpoint.fingerprint import digest_arrays
from ..shards import Sharded
from . import batches
from .base import FitContext, FitInput, UnsupportedFit

DEFAULT_BATCH_SIZE = 32  # Keras's, for array inputs without batch_size


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or (
        hasattr(value, "__array__") and hasattr(value, "shape") and hasattr(value, "dtype")
    )


def is_arrays(structure: Any) -> bool:
    """True for None, an array, or a list/tuple/dict of arrays (Keras's structures)."""
    if structure is None:
        return True
    leaves = keras.tree.flatten(structure)
    return bool(leaves) and all(_is_array(leaf) for leaf in leaves)


def to_numpy(structure: Any) -> Any:
    """Arrays as numpy arrays; an ndarray (a memory-mapped one too) and spec mode's
    shards stay as they are (np.asarray would read shards into one copy)."""
    if structure is None:
        return None
    return keras.tree.map_structure(
        lambda v: v if isinstance(v, np.ndarray | Sharded) else np.asarray(v), structure
    )


def digest(structure: Any, known: dict[int, tuple[Any, str]]) -> str | None:
    """A short digest of the arrays; a front end's own digest where it gave one."""
    if structure is None:
        return None
    leaves = keras.tree.flatten(structure)
    if leaves and all(id(leaf) in known for leaf in leaves):
        text = " ".join(known[id(leaf)][1] for leaf in leaves)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
    return digest_arrays(*leaves)[:16]


class ArrayInput(FitInput):
    kind = "arrays"

    def __init__(self, ctx: FitContext) -> None:
        super().__init__(ctx)
        a = ctx.args
        x, y, sw = to_numpy(self.x), to_numpy(self.y), to_numpy(self.sample_weight)
        if a["validation_split"] and self.validation_data is None:
            from keras.src.trainers.data_adapters import array_slicing

            (x, y, sw), self.validation_data = array_slicing.train_validation_split(
                (x, y, sw), validation_split=a["validation_split"]
            )
            x, y, sw = to_numpy(x), to_numpy(y), to_numpy(sw)
        self.x, self.y, self.sample_weight = x, y, sw
        sizes = {len(leaf) for leaf in keras.tree.flatten([x, y, sw]) if leaf is not None}
        if len(sizes) != 1:
            raise UnsupportedFit(
                f"{ctx.script}: fit(): x, y and sample_weight have different "
                f"numbers of samples ({sorted(sizes)})"
            )
        self.samples = sizes.pop()
        self.batch_size = int(a["batch_size"] or DEFAULT_BATCH_SIZE)
        self.batches_per_pass = math.ceil(self.samples / self.batch_size)
        self.steps = int(a["steps_per_epoch"] or self.batches_per_pass)
        if self.steps != self.batches_per_pass and self.samples % self.batch_size:
            raise UnsupportedFit(
                f"{ctx.script}: fit(steps_per_epoch={self.steps}) over "
                f"{self.samples} samples in batches of {self.batch_size} would put a "
                "partial batch inside an epoch; script mode resumes such a fit only "
                "when the sample count is a multiple of batch_size (or without "
                "steps_per_epoch)"
            )
        self.training: batches.Gathered | None = None  # one pipeline per fit

    def fingerprint(self) -> Any:
        known = self.ctx.known_digests
        return [digest(p, known) for p in (self.x, self.y, self.sample_weight)]

    def build_batch(self) -> Any:
        bs = self.batch_size

        def head(s: Any) -> Any:
            if s is None:
                return None
            return keras.tree.map_structure(lambda v: batches.as_keras(v[:bs]), s)

        return (head(self.x), head(self.y), head(self.sample_weight))

    def global_batch(self) -> int | None:
        return self.batch_size

    def _pass_order(self, p: int) -> np.ndarray:
        shuffle, n, bs = self.ctx.args["shuffle"], self.samples, self.batch_size
        rng = np.random.default_rng([self.ctx.seed, p])
        if shuffle == "batch":
            blocks = rng.permutation(self.batches_per_pass)
            return np.concatenate([np.arange(b * bs, min((b + 1) * bs, n)) for b in blocks])
        if shuffle:
            return rng.permutation(n)
        return np.arange(n)

    def indices(self, epoch: int, start: int) -> np.ndarray:
        """Sample indices of the batches [start, steps) of `epoch`, in order."""
        bs, per_pass = self.batch_size, self.batches_per_pass
        parts = []
        orders: dict[int, np.ndarray] = {}
        for g in range(epoch * self.steps + start, (epoch + 1) * self.steps):
            p, b = divmod(g, per_pass)
            if p not in orders:
                orders[p] = self._pass_order(p)
            parts.append(orders[p][b * bs : (b + 1) * bs])
        return np.concatenate(parts) if parts else np.arange(0)

    def epoch(self, epoch: int, start: int) -> dict[str, Any]:
        if self.training is None:
            element = batches.parts(self.x, self.y, self.sample_weight)
            self.training = batches.Gathered(element, int(self.batch_size))
        dataset, count = self.training.epoch(self.indices(epoch, start))
        return {"x": dataset, "steps_per_epoch": count, "shuffle": False}
