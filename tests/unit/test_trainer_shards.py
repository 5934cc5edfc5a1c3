"""Spec mode's .npy directories without TensorFlow: `Sharded` against np.concatenate,
the directory's rules (one SpecError naming spec.data.path each), memory-mapping, and the
data digest that reads a sample of a large set instead of all of it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from tuneop_contract.spec import DataSpec, SpecError
from tuneop_trainer.checkpoint import fingerprint
from tuneop_trainer.data import load
from tuneop_trainer.data.shards import Sharded

LENGTHS = (7, 0, 1, 12, 5)  # an empty shard and a one-row shard among them


@pytest.fixture
def pieces() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((n, 3, 2)).astype(np.float32) for n in LENGTHS]


def test_gather_matches_concatenate(pieces: list[np.ndarray]) -> None:
    whole = np.concatenate(pieces)
    sharded = Sharded(pieces)
    got = (sharded.shape, sharded.dtype, sharded.ndim, len(sharded))
    assert got == (whole.shape, whole.dtype, whole.ndim, len(whole))
    rng = np.random.default_rng(1)
    for size in (0, 1, 3, 25, 100):  # unsorted, with repeats and negative indices
        index = rng.integers(-len(whole), len(whole), size=size)
        gathered = sharded[index]
        assert isinstance(gathered, np.ndarray) and gathered.dtype == whole.dtype
        assert np.array_equal(gathered, whole[index])
    order = rng.permutation(len(whole))  # an epoch's order, as batches.py gathers it
    batches = [sharded[order[i : i + 4]] for i in range(0, len(order), 4)]
    assert np.array_equal(np.concatenate(batches), whole[order])
    assert np.array_equal(sharded[[2, 8, 8, 0]], whole[[2, 8, 8, 0]])  # a list
    for i in (0, 6, 7, 8, 19, -1, -25, np.int64(9)):
        assert np.array_equal(sharded[i], whole[i])
    assert sharded.max() == whole.max()
    assert np.array_equal(np.asarray(sharded), whole)


def test_slices_are_views_and_match(pieces: list[np.ndarray]) -> None:
    whole = np.concatenate(pieces)
    sharded = Sharded(pieces)
    keys = [slice(None), slice(3, 9), slice(-5, None), slice(None, -5), slice(8, 8)]
    keys += [slice(20, 40), slice(1, 20, 3), slice(None, None, -1), slice(30, 2)]
    for key in keys:
        got = sharded[key]
        assert np.array_equal(np.asarray(got), whole[key]), key
        assert len(got) == len(whole[key]) and got.shape[1:] == whole.shape[1:]
    view = sharded[3:20]
    assert isinstance(view, Sharded)
    # every piece of the view is a view of a shard: nothing was copied
    assert all(any(np.shares_memory(v, p) for p in pieces) for v in view.shards if v.size)
    assert np.array_equal(view[np.array([0, 16, 5])], whole[3:20][[0, 16, 5]])
    assert np.array_equal(view[-1], whole[19])


def test_bad_indices_and_shards(pieces: list[np.ndarray]) -> None:
    sharded = Sharded(pieces)
    for bad in (25, -26, np.array([0, 25]), np.array([-26])):
        with pytest.raises(IndexError, match="out of bounds for axis 0 with size 25"):
            sharded[bad]
    for bad in (np.array([0.5]), np.zeros((2, 2), int), np.array([True] * 25), (0, 1)):
        with pytest.raises(TypeError, match="indexed by an integer, a slice or a 1-D integer"):
            sharded[bad]
    with pytest.raises(ValueError, match="same dtype and trailing shape"):
        Sharded([pieces[0], pieces[3].astype(np.float64)])
    with pytest.raises(ValueError, match="same dtype and trailing shape"):
        Sharded([pieces[0], pieces[3][:, :2]])
    with pytest.raises(ValueError, match="at least one shard"):
        Sharded([])


def _save(directory: Path, **arrays: np.ndarray) -> Path:
    directory.mkdir(exist_ok=True)
    for name, value in arrays.items():
        np.save(directory / f"{name.replace('_s', '-')}.npy", value)
    return directory


def _load(directory: Path, split: float = 0.25) -> object:
    return load(DataSpec(synthetic_samples=None, path=str(directory), validation_split=split))


def test_directory_of_shards_is_one_mapped_array(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40, 4, 3)).astype(np.float32)
    y = rng.integers(0, 5, size=40)
    # x in three uneven shards numbered from 1 (no padding past 9), y one file
    parts = {"x_s1": x[:15], "x_s2": x[15:16], "x_s3": x[16:]}
    data = _load(_save(tmp_path / "d", **parts, y=y))
    assert isinstance(data.x, Sharded) and data.x.shape == (30, 4, 3, 1)  # channel axis added
    assert [type(s) for s in data.x.shards] == [np.memmap] * 3  # mapped, not read
    assert isinstance(data.y, np.memmap)
    assert np.array_equal(data.x[np.arange(30)], x[:30, ..., None])
    assert np.array_equal(np.asarray(data.x_val), x[30:, ..., None])
    assert np.array_equal(data.y_val, y[30:]) and data.output_shape == [int(y[:30].max()) + 1]
    assert data.input_shape == [4, 3]
    names = [f.name for f in data.files]
    assert names == ["x-1.npy", "x-2.npy", "x-3.npy", "y.npy"]
    # the same arrays as one file each: the same samples in the same order
    one = _load(_save(tmp_path / "one", x=x, y=y))
    assert isinstance(one.x, np.memmap) and isinstance(one.x_val, np.memmap)
    index = np.random.default_rng(3).permutation(30)
    assert np.array_equal(one.x[index], data.x[index])
    # shard numbers sort as numbers: x-9 before x-10
    ten = _save(tmp_path / "ten", **{f"x_s{i}": x[i * 4 : i * 4 + 4] for i in range(10)}, y=y)
    assert np.array_equal(np.asarray(_load(ten, 0.5).x)[..., 0], x[:20])
    # given validation arrays, sharded too
    val = _save(tmp_path / "val", x=x, y=y, x_val_s0=x[:3], x_val_s1=x[3:5], y_val=y[:5])
    data = _load(val)
    assert (len(data.x), len(data.x_val)) == (40, 5)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"x": 1, "x_s0": 1, "y": 1}, r"holds both x.npy and shards of x \(x-0.npy, ...\)"),
        ({"x_s0": 1, "x_s2": 1, "y": 1}, r"no shard 1 of x after x-0.npy \(next: x-2.npy\)"),
        ({"x_s1": 1, "x_s01": 1, "y": 1}, r"x-01.npy and x-1.npy are both shard 1 of x"),
        ({"x_s0": 1, "x_s1": "f8", "y": 1}, r"x-1.npy is float64 of shape \(4, 2\) but x-0"),
        ({"x_s0": 1, "x_s1": "wide", "y": 1}, r"every shard of x has the same dtype and shape"),
        ({"x": 1, "y_s0": 1, "y_s1": 1}, r"x has 4 samples but y has 8"),
        ({"x": 1, "y": 1, "x_val": 1}, r"has x_val but no y_val; give both or neither"),
        ({"x": 1, "y": 1, "x_val": 1, "y_val_s0": "short"}, r"x_val has 4 samples but y_val"),
        ({"x": 1, "y": "scalar"}, r"y.npy is a scalar"),
        ({"x": 1, "y": "object"}, r"cannot read y.npy as a .npy array"),
        ({"x": 1, "Y": 1}, r"must hold x.npy and y.npy .* shards x-00000.npy, x-00001.npy"),
    ],
)
def test_directory_errors_name_the_field(
    tmp_path: Path, arrays: dict[str, object], message: str
) -> None:
    kinds = {
        1: np.zeros((4, 2), np.float32),
        "f8": np.zeros((4, 2), np.float64),
        "wide": np.zeros((4, 3), np.float32),
        "short": np.zeros(3, np.float32),
        "scalar": np.float32(1),
    }
    directory = tmp_path / "d"
    directory.mkdir()
    for name, kind in arrays.items():
        path = directory / f"{name.replace('_s', '-')}.npy"
        if kind == "object":
            np.save(path, np.array([1, "a"], dtype=object), allow_pickle=True)
        else:
            np.save(path, kinds[kind])  # type: ignore[index]
    with pytest.raises(SpecError) as info:
        _load(directory)
    assert str(info.value).startswith(f'spec.data.path: "{directory}"'), info.value
    assert "\n" not in str(info.value)
    assert re.search(message, str(info.value)), info.value


def test_digest_of_files_is_sampled_when_large(tmp_path: Path) -> None:
    """Above the threshold the digest reads edges and samples (counted in the process's
    read bytes, /proc/self/io rchar), still sees a changed sampled block, a changed
    size or name, and ignores modification times."""
    big = tmp_path / "x.npy"
    with big.open("wb") as f:  # 1 GiB, sparse: cheap to make, all zeros
        f.truncate(2**30)
    before = _rchar()
    first = fingerprint.digest_files([big])
    read = _rchar() - before
    assert read <= fingerprint.SAMPLE_BLOCKS * fingerprint.BLOCK_BYTES + 4 * 2**16, read
    assert fingerprint.digest_files([big]) == first
    os.utime(big, (0, 0))  # a copy without -p: same bytes, new times
    assert fingerprint.digest_files([big]) == first
    with big.open("r+b") as f:  # a byte inside the 100th sampled block
        f.seek(100 * (2**30 - fingerprint.BLOCK_BYTES) // (fingerprint.SAMPLE_BLOCKS - 1) + 7)
        f.write(b"\1")
    changed = fingerprint.digest_files([big])
    assert changed != first
    assert fingerprint.digest_files([big], extra="[shapes]") != changed
    renamed = big.rename(tmp_path / "y.npy")
    assert fingerprint.digest_files([renamed]) != changed
    with renamed.open("r+b") as f:
        f.truncate(2**30 + 1)
    assert fingerprint.digest_files([renamed]) != changed
    # below the threshold every byte counts
    small = tmp_path / "s.npy"
    np.save(small, np.zeros(1000, np.float32))
    whole = fingerprint.digest_files([small])
    with small.open("r+b") as f:
        f.seek(2000)
        f.write(b"\1")
    assert fingerprint.digest_files([small]) != whole
    assert fingerprint.digest_files([small], full_bytes=0) != fingerprint.digest_files([small])


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_dataset_digest_covers_the_split(tmp_path: Path) -> None:
    x = np.arange(40 * 6, dtype=np.float32).reshape(40, 6)
    directory = _save(tmp_path / "d", x=x, y=np.arange(40))
    assert _load(directory, 0.25).digest() == _load(directory, 0.25).digest()
    assert _load(directory, 0.25).digest() != _load(directory, 0.5).digest()
