"""`spec.data.path` as a directory of .npy files, opened memory-mapped.

Each of x, y, x_val, y_val (the last two optional, together) is one file (`x.npy`) or
shards (`x-00000.npy`, `x-00001.npy`, ...: one array, concatenated virtually in the
order of their numbers by `shards.Sharded`). Every file is opened with
`np.load(mmap_mode="r")`: only the pages a batch touches are read, by the kernel, and
they stay reclaimable page cache, so a set larger than memory trains with flat
anonymous memory. Other files in the directory are ignored.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np
from tuneop_contract.spec import SpecError

from .shards import Sharded

NAMES = ("x", "y", "x_val", "y_val")
FIELD = "spec.data.path"
ALLOWED = (
    "x.npy and y.npy (x_val.npy and y_val.npy optional), each one file or numbered "
    "shards x-00000.npy, x-00001.npy, ..."
)
_FILE = re.compile(r"^(x|y|x_val|y_val)(?:-(\d+))?\.npy$")


def open_directory(path: Path) -> tuple[dict[str, Any], tuple[Path, ...]]:
    """The directory's arrays by name (an ndarray memmap or a `Sharded` of them) and the
    files they are read from, in order; SpecError naming spec.data.path if not valid."""
    found: dict[str, dict[int | None, list[Path]]] = {}
    for f in sorted(path.iterdir()):
        match = _FILE.match(f.name)
        if match and f.is_file():
            name, number = match.group(1), match.group(2)
            numbers = found.setdefault(name, {})
            numbers.setdefault(None if number is None else int(number), []).append(f)
    arrays: dict[str, Any] = {}
    files: list[Path] = []
    for name in NAMES:
        if name in found:
            paths = _ordered(path, name, found[name])
            arrays[name] = _array(path, name, paths)
            files += paths
    if "x" not in arrays or "y" not in arrays:
        raise SpecError(FIELD, f'"{path}" must hold {ALLOWED}')
    if ("x_val" in arrays) != ("y_val" in arrays):
        given, lacking = ("x_val", "y_val") if "x_val" in arrays else ("y_val", "x_val")
        raise SpecError(FIELD, f'"{path}" has {given} but no {lacking}; give both or neither')
    for a, b in (("x", "y"), ("x_val", "y_val")):
        if a in arrays and len(arrays[a]) != len(arrays[b]):
            raise SpecError(
                FIELD,
                f'"{path}": {a} has {len(arrays[a])} samples but {b} has {len(arrays[b])}',
            )
    return arrays, tuple(files)


def _ordered(path: Path, name: str, numbers: dict[int | None, list[Path]]) -> list[Path]:
    """One array's files: `name.npy` alone, or its shards by number without gaps."""
    if None in numbers:
        if len(numbers) > 1:
            first = numbers[min(n for n in numbers if n is not None)][0].name
            raise SpecError(
                FIELD,
                f'"{path}" holds both {name}.npy and shards of {name} ({first}, ...); '
                "an array is one file or shards, not both",
            )
        return numbers[None]
    for number, paths in numbers.items():
        if len(paths) > 1:
            listed = " and ".join(p.name for p in paths)
            raise SpecError(FIELD, f'"{path}": {listed} are both shard {number} of {name}')
    ordered = sorted(n for n in numbers if n is not None)
    for previous, number in itertools.pairwise(ordered):
        if number != previous + 1:
            before = numbers[previous][0].name
            raise SpecError(
                FIELD,
                f'"{path}": no shard {previous + 1} of {name} after {before} (next: '
                f"{numbers[number][0].name}); shards are numbered without gaps",
            )
    return [numbers[n][0] for n in ordered]


def _array(path: Path, name: str, files: list[Path]) -> Any:
    arrays = [_open(path, f) for f in files]
    first = arrays[0]
    for f, a in zip(files[1:], arrays[1:], strict=False):
        if a.dtype != first.dtype or a.shape[1:] != first.shape[1:]:
            raise SpecError(
                FIELD,
                f'"{path}": {f.name} is {a.dtype} of shape {a.shape} but {files[0].name} is '
                f"{first.dtype} of shape {first.shape}; every shard of {name} has the same "
                "dtype and shape after the first axis",
            )
    return first if len(arrays) == 1 else Sharded(arrays)


def _open(path: Path, f: Path) -> np.ndarray:
    try:
        array = np.load(f, mmap_mode="r")
    except (ValueError, OSError, EOFError) as exc:
        raise SpecError(FIELD, f'"{path}": cannot read {f.name} as a .npy array: {exc}') from exc
    if array.ndim == 0:
        raise SpecError(FIELD, f'"{path}": {f.name} is a scalar; expected an array of samples')
    return array
