"""Checkpoint integrity: a corrupt latest checkpoint falls back to the previous one."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from trainer_helpers import comparable, kill_when, results, run, spec_fit, tiny_spec, write_spec
from tuneop_contract import EXIT_COMPLETED, read_progress
from tuneop_trainer.checkpoint import CheckpointStore

from tests.checkpoints import committed, positions


def test_store_keeps_last_k_and_falls_back(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for i in range(4):
        store.save({"model/0": np.full(3, i, dtype=np.float32)}, {"epoch": i, "step": 0})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000002", "ckpt-00000003"]
    arrays, meta, path = store.latest()  # type: ignore[misc]
    assert meta["epoch"] == 3 and path.name == "ckpt-00000003"
    state = path / "state.npz"
    state.write_bytes(state.read_bytes()[:-10])  # truncated, as by a crash mid-copy
    arrays, meta, path = store.latest()  # type: ignore[misc]
    assert meta["epoch"] == 2 and arrays["model/0"].tolist() == [2, 2, 2]
    (path / "MANIFEST.json").unlink()  # a checkpoint without manifest is incomplete
    assert store.latest() is None


def test_the_tests_read_a_commit_as_the_store_writes_it(tmp_path: Path) -> None:
    """tests/checkpoints.py, which the kill points of the resume tests wait on, sees a
    checkpoint once the store has renamed it into place, not while it is being written."""
    store = CheckpointStore(tmp_path, keep=2)
    assert positions(tmp_path) == [] and not committed(tmp_path)
    store.save({"model/0": np.zeros(3, dtype=np.float32)}, {"epoch": 0, "step": 3})
    tmp = tmp_path / ".tmp-ckpt-00000001-1"  # a save in flight (or left by a SIGKILL)
    shutil.copytree(tmp_path / "ckpt-00000000", tmp)
    (tmp / "meta.json").write_text(json.dumps({"epoch": 1, "step": 0}))
    assert positions(tmp_path) == [(0, 3)]
    assert committed(tmp_path) and committed(tmp_path, at=(0, 3))
    assert not committed(tmp_path, at=(0, 4)) and not committed(tmp_path, at=(1, 0))
    shutil.rmtree(tmp)
    store.save({"model/0": np.ones(3, dtype=np.float32)}, {"epoch": 1, "step": 0})
    assert positions(tmp_path) == [(0, 3), (1, 0)] and committed(tmp_path, at=(0, 4))


@pytest.mark.slow
def test_corrupt_latest_checkpoint_falls_back_and_finishes(tmp_path: Path) -> None:
    manifest = tiny_spec(algorithm="RandomSearch", maxTrials=2, maxEpochs=2)
    spec = write_spec(tmp_path, manifest)
    ref = tmp_path / "reference"
    assert run(spec, ref, tmp_path / "ref.log") == EXIT_COMPLETED

    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    second = results(ref)["trials"][1]["trialId"]
    # Kill in the second trial's second epoch, once it has two checkpoints.
    code = kill_when(
        spec, ckpt, log, lambda p: p.trial_id == second and p.epoch == 1 and p.step >= 3
    )
    assert code == -signal.SIGKILL
    exec_dir = ckpt / spec_fit(second)
    ckpts = sorted(exec_dir.glob("ckpt-*"))
    # keep=2, plus one more if the kill fell between a save and the pruning after it.
    assert len(ckpts) in (2, 3), ckpts
    latest, previous = ckpts[-1], ckpts[-2]
    corrupt = bytearray((latest / "state.npz").read_bytes())
    corrupt[len(corrupt) // 2] ^= 0xFF  # one flipped byte: sha256 catches it
    (latest / "state.npz").write_bytes(bytes(corrupt))
    prev_meta = json.loads((previous / "meta.json").read_text())

    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    assert f"checkpoint {latest} is corrupt" in text
    assert (
        f"restored {previous.name} at epoch {prev_meta['epoch']} step {prev_meta['step']}" in text
    )
    # Falling back loses time, not exactness.
    assert comparable(results(ckpt)) == comparable(results(ref))
    assert results(ckpt)["best"]["weightsSha256"] == results(ref)["best"]["weightsSha256"]
    progress = read_progress(ckpt)
    assert progress is not None and progress.phase == "Completed" and progress.trials_completed == 2
