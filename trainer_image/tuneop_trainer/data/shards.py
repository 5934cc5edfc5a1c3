"""Several arrays read as one along the first axis, without concatenating them.

A data set kept as shards (`x-00000.npy`, `x-00001.npy`, ...) is opened memory-mapped
shard by shard; `Sharded` makes the shards one array for what the spec-mode loop asks
of it: `shape`, `dtype`, `ndim`, `len()`, one sample by integer, a batch by an integer
index array (inputs/batches.py gathers every batch that way) and a view by a slice of step 1
(the validation tail). A gather reads only the rows it returns, from the shards that
hold them, into one new array; nothing else is copied. `np.asarray(sharded)` does
concatenate: it is for the small slices that need a real ndarray (a model's first
batch).

Why our own class: numpy concatenates only by copying, and the libraries that
concatenate lazily (dask.array, or xarray on top of it) bring a task scheduler whose
fancy indexing with an unsorted index array splits a batch into one task per run of
rows; a gather here is one `searchsorted`, one stable `argsort` and one numpy gather
per shard the batch touches.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np


class Sharded:
    """`shards` (arrays of the same dtype and trailing shape) as one array."""

    def __init__(self, shards: Sequence[np.ndarray]) -> None:
        if not shards:
            raise ValueError("Sharded needs at least one shard")
        first = shards[0]
        for shard in shards[1:]:
            if shard.dtype != first.dtype or shard.shape[1:] != first.shape[1:]:
                raise ValueError(
                    f"shard of dtype {shard.dtype} and shape {shard.shape} does not match "
                    f"the first's {first.dtype} and {first.shape}: every shard needs the "
                    "same dtype and trailing shape"
                )
        self.shards = tuple(shards)
        self.dtype = first.dtype
        # offsets[i] is the first row of shard i; offsets[-1] the total length
        self.offsets = np.cumsum([0, *(len(s) for s in shards)], dtype=np.int64)
        self.shape: tuple[int, ...] = (int(self.offsets[-1]), *first.shape[1:])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Sharded(shape={self.shape}, dtype={self.dtype}, shards={len(self.shards)})"

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                return self[np.arange(start, stop, step)]
            return self._view(start, max(start, stop))
        if isinstance(key, int | np.integer):
            (row,) = self._rows(np.array([operator.index(key)]))
            shard = int(np.searchsorted(self.offsets, row, side="right")) - 1
            return self.shards[shard][row - self.offsets[shard]]
        # a tuple indexes several axes in numpy: refused rather than read as rows
        index = np.asarray(key) if not isinstance(key, tuple) else np.empty((0, 0))
        if index.ndim != 1 or (index.dtype.kind not in "iu" and index.size):
            raise TypeError(
                "a Sharded array is indexed by an integer, a slice or a 1-D integer "
                f"index array, not {type(key).__name__}"
                + (f" of {index.dtype} and shape {index.shape}" if index.ndim else "")
            )
        return self._gather(self._rows(index.astype(np.int64, copy=False)))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The whole array, concatenated: a copy; meant for small slices."""
        out = np.concatenate(self.shards)
        return out if dtype is None else out.astype(dtype, copy=False)

    def max(self) -> Any:
        """The largest element over every shard (each shard read once, in order)."""
        return max(s.max() for s in self.shards if s.size)

    def _rows(self, index: np.ndarray) -> np.ndarray:
        """Negative indices counted from the end; IndexError past either end."""
        n = len(self)
        rows = np.where(index < 0, index + n, index)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            bad = index[(rows < 0) | (rows >= n)][0]
            raise IndexError(f"index {bad} is out of bounds for axis 0 with size {n}")
        return rows

    def _gather(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        if not rows.size:
            return out
        shard = np.searchsorted(self.offsets, rows, side="right") - 1
        by_shard = np.argsort(shard, kind="stable")  # rows grouped by shard
        groups = np.split(by_shard, np.flatnonzero(np.diff(shard[by_shard])) + 1)
        for group in groups:
            s = int(shard[group[0]])
            out[group] = self.shards[s][rows[group] - self.offsets[s]]
        return out

    def _view(self, start: int, stop: int) -> Sharded:
        pieces = []
        for s, shard in enumerate(self.shards):
            lo, hi = int(self.offsets[s]), int(self.offsets[s + 1])
            if hi > start and lo < stop:
                pieces.append(shard[max(start, lo) - lo : min(stop, hi) - lo])
        return Sharded(pieces or [self.shards[0][:0]])
