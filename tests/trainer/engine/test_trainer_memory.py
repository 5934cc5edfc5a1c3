"""Numpy inputs are gathered batch by batch (batches.py), in both modes: five epochs over
a 320 MB training set keep the trainer's resident memory where it was before training.
A copy of the set per epoch (handing Keras `x[order]`) adds the whole set again at every
epoch end, well past the margin."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from trainer_helpers import SCRIPTS, start, start_exec, status_mb, write_spec
from tuneop_contract import EXIT_COMPLETED, read_progress

DATA_MB = 320
MARGIN_MB = DATA_MB / 4  # TF's own growth stays far below; a copy is 4x this

pytestmark = pytest.mark.slow


def _assert_flat(epochs_mb: list[float], before_mb: float, data_mb: float) -> None:
    assert data_mb >= DATA_MB * 0.99
    assert len(epochs_mb) == 5, epochs_mb
    growth = [round(mb - before_mb) for mb in epochs_mb]
    assert max(growth) < MARGIN_MB, f"RSS above the pre-training {before_mb:.0f} MB: {growth}"


@pytest.fixture
def out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the script or loader writes its memory record (MEMORY_OUT)."""
    path = tmp_path / "memory.json"
    monkeypatch.setenv("MEMORY_OUT", str(path))
    monkeypatch.setenv("MEMORY_MB", str(DATA_MB))
    return path


def test_script_mode_fit_does_not_copy_the_set(tmp_path: Path, out: Path) -> None:
    log = tmp_path / "log"
    proc = start_exec(SCRIPTS / "memory_fit.py", tmp_path / "ckpt", log, devices=1, fresh=True)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    record = json.loads(out.read_text())
    _assert_flat(record["epochsMB"], record["beforeMB"], record["dataMB"])


def test_spec_mode_trial_does_not_copy_the_set(tmp_path: Path, out: Path) -> None:
    manifest = {
        "hypermodel": "user_models:build_linear",
        "pythonPath": [str(SCRIPTS)],
        "data": {"loader": "user_models:load_large"},
        "tuner": {
            "algorithm": "RandomSearch",
            "maxTrials": 1,
            "maxEpochs": 5,
            "batchSize": 8192,
            "objective": {"name": "val_loss", "direction": "min"},
        },
        "checkpoint": {"intervalSteps": 0, "intervalSeconds": 0},
    }
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    proc = start(write_spec(tmp_path, manifest), ckpt, log, devices=1, fresh=True)
    peak: dict[int, float] = {}  # epoch in progress → highest RSS seen during it
    while proc.poll() is None:
        rss = status_mb(proc.pid, "VmRSS")
        progress = read_progress(ckpt) if ckpt.exists() else None
        if rss is not None and progress is not None and progress.trial_id:
            peak[progress.epoch] = max(peak.get(progress.epoch, 0.0), rss[0])
        time.sleep(0.02)
    assert proc.returncode == EXIT_COMPLETED, log.read_text()[-3000:]
    record = json.loads(out.read_text())
    epochs = [peak[e] for e in sorted(peak) if e < 5]
    # The baseline is the RSS right after loading, before TensorFlow built, traced and
    # saved anything (the model, its tf.functions, the first best-epoch weights file):
    # the first epoch carries those once, 60-90 MB here. A copy of the set would add the
    # whole set (320 MB) to it; a copy per epoch or a leak, growth after it.
    first = round(epochs[0] - record["loadedMB"])
    assert first < DATA_MB / 2, f"first epoch {first} MB above the loaded set: a copy?"
    _assert_flat(epochs, epochs[0], record["dataMB"])
