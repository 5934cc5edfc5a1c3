"""Spec mode over a directory of .npy files (data/npy.py, data/shards.py), in the real trainer:
shards resume exactly and train as the same arrays in one file do; a memory-mapped set
keeps the trainer's anonymous memory where a set of a few MB leaves it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from trainer_helpers import (
    SCRIPTS,
    comparable,
    kill_and_resume,
    results,
    run,
    spec_fit,
    start,
    status_mb,
    tiny_spec,
    write_spec,
)
from tuneop_contract import EXIT_COMPLETED
from tuneop_trainer.data import synthetic_emg

from tests.checkpoints import committed

pytestmark = [pytest.mark.slow, pytest.mark.devices(2)]


def _spec(path: Path, **tuner: Any) -> dict[str, Any]:
    manifest = tiny_spec(algorithm="RandomSearch", maxTrials=2, **tuner)
    manifest["spec"]["data"] = {"path": str(path), "validationSplit": 0.2}
    return manifest


def test_shards_resume_exactly_and_train_as_one_file(tmp_path: Path) -> None:
    x, y = synthetic_emg(80, seed=3)
    one = tmp_path / "one"
    one.mkdir()
    np.save(one / "x.npy", x)
    np.save(one / "y.npy", y)
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    for i, (lo, hi) in enumerate(((0, 30), (30, 31), (31, 80))):  # uneven; without channel axis
        np.save(sharded / f"x-{i:05d}.npy", x[lo:hi, ..., 0])
    for i, (lo, hi) in enumerate(((0, 50), (50, 80))):  # split elsewhere than x
        np.save(sharded / f"y-{i:05d}.npy", y[lo:hi])

    ref, ref_log = tmp_path / "ref", tmp_path / "ref.log"
    assert run(write_spec(tmp_path, _spec(one), "one.yaml"), ref, ref_log) == EXIT_COMPLETED
    spec = write_spec(tmp_path, _spec(sharded), "sharded.yaml")
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    first = results(ref)["trials"][0]["trialId"]
    text = kill_and_resume(
        spec,
        ckpt,
        log,
        lambda p: (
            p.trial_id == first
            and p.epoch >= 1
            and p.step >= 4
            and committed(ckpt / spec_fit(first))
        ),
    )
    assert "restored ckpt-" in text
    got, want = results(ckpt), results(ref)
    assert comparable(got) == comparable(want)
    assert got["best"]["weightsSha256"] == want["best"]["weightsSha256"]


DATA_MB = 400
MARGIN_MB = DATA_MB / 4  # a copy of the set, at start or per epoch, is 4x this
BATCH = 8192
SAMPLE_BYTES = 16 * 8 * 4  # one (16, 8) float32 window


def _write_set(directory: Path, samples: int, shards: int) -> None:
    """`samples` EMG-shaped windows as `shards` x shards and one y, written a chunk at a
    time (this process never holds the set)."""
    directory.mkdir()
    rng = np.random.default_rng(0)
    per = -(-samples // shards)
    labels = np.empty(samples, np.int64)
    for s in range(shards):
        n = min(per, samples - s * per)
        x = np.lib.format.open_memmap(directory / f"x-{s:05d}.npy", "w+", np.float32, (n, 16, 8))
        for lo in range(0, n, 65536):
            chunk = rng.standard_normal((min(65536, n - lo), 16, 8), dtype=np.float32)
            x[lo : lo + len(chunk)] = chunk
            labels[s * per + lo : s * per + lo + len(chunk)] = chunk[:, 0, 0] > 0
        x.flush()
        del x
    np.save(directory / "y.npy", np.eye(4, dtype=np.float32)[labels])


def _peak_memory(tmp: Path, data: Path) -> tuple[float, float]:
    """Peak (RssAnon, RssFile) of a 2-epoch spec-mode search over `data`."""
    manifest = {
        "hypermodel": "user_models:build_linear",
        "pythonPath": [str(SCRIPTS)],
        "data": {"path": str(data), "validationSplit": 0.05},
        "tuner": {
            "algorithm": "RandomSearch",
            "maxTrials": 1,
            "maxEpochs": 2,
            "batchSize": BATCH,
            "objective": {"name": "val_loss", "direction": "min"},
        },
        "checkpoint": {"intervalSteps": 0, "intervalSeconds": 0},
    }
    ckpt, log = tmp / f"ckpt-{data.name}", tmp / f"{data.name}.log"
    proc = start(write_spec(tmp, manifest, f"{data.name}.yaml"), ckpt, log, devices=1, fresh=True)
    anon = file = 0.0
    while proc.poll() is None:
        sample = status_mb(proc.pid, "RssAnon", "RssFile")
        if sample is not None:
            anon, file = max(anon, sample[0]), max(file, sample[1])
        time.sleep(0.02)
    assert proc.returncode == EXIT_COMPLETED, log.read_text()[-3000:]
    return anon, file


def test_memory_mapped_set_leaves_anonymous_memory_flat(tmp_path: Path) -> None:
    samples = DATA_MB * 2**20 // SAMPLE_BYTES
    _write_set(tmp_path / "large", samples, shards=4)
    _write_set(tmp_path / "small", 4 * BATCH, shards=2)
    small_anon, small_file = _peak_memory(tmp_path, tmp_path / "small")
    large_anon, large_file = _peak_memory(tmp_path, tmp_path / "large")
    grown = large_anon - small_anon
    print(f"peak RssAnon {small_anon:.0f} -> {large_anon:.0f} MB, RssFile {small_file:.0f} -> "
          f"{large_file:.0f} MB over a {DATA_MB} MB set")  # fmt: skip
    assert grown < MARGIN_MB, f"{DATA_MB} MB set: RssAnon {grown:.0f} MB above a 16 MB one's"
    # the set was read where it lies, through the mapping (not copied in some other way)
    assert large_file - small_file > DATA_MB / 2, (small_file, large_file)
