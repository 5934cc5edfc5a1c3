"""Checkpoint integrity: a corrupt latest checkpoint falls back to the previous one."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest
from trainer_helpers import comparable, kill_when, results, run, spec_fit, tiny_spec, write_spec
from tuneop_contract import EXIT_COMPLETED, read_progress
from tuneop_trainer.checkpoint import CheckpointStore


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
