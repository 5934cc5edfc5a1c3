"""What a search depends on, recorded at its first run and compared at every resume,
so a resume against different code, data or arguments stops with a one-line error
instead of silently mixing two searches in one checkpoint directory."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tuneop_contract import write_atomic
from tuneop_contract.spec import SpecError

from .. import preemption

RECORD_FILE = "fingerprint.json"


# Digests already computed in this process, keyed by buffer address, shape, strides and
# dtype: every trial's fit gets the same arrays (or views of them), and hashing a large
# training set once per trial would cost seconds each. Each entry keeps its array alive,
# so an address cannot be reused for other data while it is cached.
_cache: dict[tuple[Any, ...], tuple[np.ndarray, str]] = {}
_CACHE_SIZE = 64


def digest_array(value: Any) -> str:
    """sha256 over one array's dtype, shape and bytes (cached per process)."""
    array = np.asarray(value)
    key = (array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str)
    hit = _cache.get(key)
    if hit is not None:
        return hit[1]
    digest = hashlib.sha256(f"{array.dtype}{array.shape}".encode())
    digest.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache)))
    _cache[key] = (array, digest.hexdigest())
    return _cache[key][1]


def digest_arrays(*arrays: Any) -> str:
    """One digest over several arrays (None allowed)."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(b"none" if array is None else digest_array(array).encode())
    return digest.hexdigest()


# Files read from disk (spec mode's .npy directories, memory-mapped): hashed whole up to
# FULL_BYTES in all; above, sampled, so a resume over a 100 GB set starts in seconds.
FULL_BYTES = 256 * 2**20
EDGE_BYTES = 4096  # of every file, at each end: the header (shape, dtype) and the edges
SAMPLE_BLOCKS = 256  # then this many blocks, evenly spaced over all the files' bytes
BLOCK_BYTES = 64 * 2**10


def digest_files(paths: Sequence[Path], extra: str = "", full_bytes: int = FULL_BYTES) -> str:
    """sha256 over the files' names, sizes and contents, and `extra`. Contents: all of
    them when the files hold at most `full_bytes` together; else the first and last
    EDGE_BYTES of every file and SAMPLE_BLOCKS blocks of BLOCK_BYTES spread evenly over
    the rest (≤ 16 MiB + 8 KiB a file). A sample catches a regenerated, reordered,
    truncated or extended set; a change confined to unsampled bytes is missed. No
    modification times: copying a data set (to a new volume, without -p) changes them
    and would refuse a resume over the same bytes."""
    sizes = [p.stat().st_size for p in paths]
    digest = hashlib.sha256(extra.encode())
    for path, size in zip(paths, sizes, strict=True):
        digest.update(f"\0{path.name}\0{size}\0".encode())
    if sum(sizes) <= full_bytes:
        for path in paths:
            with path.open("rb") as f:
                while chunk := f.read(2**20):
                    digest.update(chunk)
        return digest.hexdigest()
    for path, size in zip(paths, sizes, strict=True):
        with path.open("rb") as f:
            digest.update(f.read(EDGE_BYTES))
            f.seek(max(0, size - EDGE_BYTES))
            digest.update(f.read(EDGE_BYTES))
    starts = np.cumsum([0, *sizes])
    total = int(starts[-1])
    for k in range(SAMPLE_BLOCKS):
        at = k * max(0, total - BLOCK_BYTES) // (SAMPLE_BLOCKS - 1)
        i = int(np.searchsorted(starts, at, side="right")) - 1
        with paths[i].open("rb") as f:  # a block ends where its file does
            f.seek(at - int(starts[i]))
            digest.update(f.read(BLOCK_BYTES))
    return digest.hexdigest()


def check_or_record(
    root: Path, record: dict[str, Any], fields: dict[str, str], write: bool, wait: float = 0.0
) -> None:
    """Compare `record` with the one in `root` (write it if there is none).
    `fields` maps each record key to (the field named in the error) and says what it
    is, e.g. {"data": "spec.data"}; the first difference raises SpecError. A process that
    does not write (a parallel search's trial group: the oracle records it) waits up to
    `wait` seconds for the record to appear, then goes on without one; a SIGTERM ends
    the wait (Preempted: exit 75, nothing to save yet)."""
    path = root / RECORD_FILE
    deadline = time.monotonic() + wait
    while not write and not path.exists() and time.monotonic() < deadline:
        if preemption.requested():
            raise preemption.Preempted()
        time.sleep(0.2)
    if not path.exists():
        if write:
            write_atomic(path, json.dumps(record, sort_keys=True).encode())
        return
    saved = json.loads(path.read_text())
    for key, field in fields.items():
        if saved.get(key) != record.get(key):
            raise SpecError(
                field,
                f"{key} changed since the search in {root} started ({_short(saved.get(key))} "
                f"then, {_short(record.get(key))} now); resume with what it started with, or "
                "start over with an empty checkpoint directory",
            )


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:12] + "..."
