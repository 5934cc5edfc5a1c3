"""The checkpoint volume fills up mid-search (a real size-limited tmpfs, real TF): the
trainer exits 75 with a one-line message, no trial is recorded FAILED, and once there is
room again the search resumes and ends bit-identical to an uninterrupted one. Also: a
finished execution's checkpoints are pruned and the volume use is in progress."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import (
    comparable,
    results,
    run,
    spec_fit,
    start,
    tiny_spec,
    wait_for,
    write_spec,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_PREEMPTED, read_progress


def fill(volume: Path) -> Path:
    """Write a file until the volume has no room left."""
    filler = volume / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass
    return filler


def trial_statuses(ckpt: Path) -> dict[str, str]:
    return {
        p.parent.name: json.loads(p.read_text())["status"]
        for p in (ckpt / "tuner" / "search").glob("trial_*/trial.json")
    }


@pytest.mark.slow
def test_full_volume_is_retried_not_a_failed_trial(tmp_path: Path, tmpfs: Any) -> None:
    with tmpfs("32m") as volume:
        _run(tmp_path, volume)


def _run(tmp_path: Path, volume: Path) -> None:
    manifest = tiny_spec(algorithm="RandomSearch", maxTrials=2, maxEpochs=2)
    spec = write_spec(tmp_path, manifest)
    ref = tmp_path / "reference"
    assert run(spec, ref, tmp_path / "ref.log") == EXIT_COMPLETED
    second = results(ref)["trials"][1]["trialId"]

    ckpt, log = volume / "ckpt", tmp_path / "log"
    proc = start(spec, ckpt, log)
    try:
        wait_for(proc, ckpt, lambda p: p.trial_id == second and p.step >= 1)
        filler = fill(volume)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == EXIT_PREEMPTED, text[-3000:]
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, text[-3000:]
    assert "checkpoint volume error: No space left on device (ENOSPC)" in errors[0]
    assert "resumes from its previous checkpoint" in errors[0]
    assert "Traceback" not in text
    assert "FAILED" not in trial_statuses(ckpt).values()

    filler.unlink()  # room again: the next pod resumes the search
    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert comparable(results(ckpt)) == comparable(results(ref))
    assert results(ckpt)["best"]["weightsSha256"] == results(ref)["best"]["weightsSha256"]
    # a finished trial keeps its fit's final state and keras-tuner's best epoch only
    for trial in results(ckpt)["trials"]:
        assert len(list((ckpt / spec_fit(trial["trialId"])).glob("ckpt-*"))) == 1
        best_epoch = ckpt / "tuner" / "search" / f"trial_{trial['trialId']}"
        assert (best_epoch / "checkpoint.weights.h5").exists()
    progress = read_progress(ckpt)
    assert progress is not None and progress.checkpoint_bytes and progress.volume_free_bytes
    assert progress.volume_free_bytes < 32 * 1024 * 1024
