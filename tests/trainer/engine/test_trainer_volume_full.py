"""The checkpoint volume fills up mid-search (a real size-limited tmpfs, real TF): the
trainer exits 75 with a one-line message, no trial is recorded FAILED, and once there is
room again the search resumes and ends bit-identical to an uninterrupted one. Also: a
finished execution's checkpoints are pruned and the volume use is in progress."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import (
    comparable,
    env,
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


# keras-tuner's best-epoch save (SaveBestEpoch, patched by the trainer) on a volume with
# too little room for the file: it runs in a fresh process, because HDF5 writing to a
# volume that fills under it can take the process down (SIGSEGV) instead of raising.
BEST_EPOCH_ON_A_FULL_VOLUME = textwrap.dedent("""
    import os, sys, types
    from pathlib import Path
    import keras, keras_tuner, numpy as np
    from keras_tuner.src.engine import tuner_utils
    from tuneop_trainer.checkpoint import VolumeError
    from tuneop_trainer.engine import runtime
    from tuneop_trainer.patches import tuners

    path, filler = Path(sys.argv[1]), Path(sys.argv[2])
    runtime.install(types.SimpleNamespace(write=True))
    tuners._patch_save_best_epoch()
    model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(1024)])  # 2 MiB
    objective = keras_tuner.Objective("loss", "min")
    saver = tuner_utils.SaveBestEpoch(objective=objective, filepath=str(path))
    saver.set_model(model)
    saver._save_model()
    first = [w.copy() for w in model.get_weights()]
    model.set_weights([w + 1 for w in first])
    with open(filler, "wb") as handle:  # leave room for half the file: it fills mid-write
        try:
            while True:
                handle.write(b"0" * 65536)
                handle.flush()
        except OSError:
            pass
    os.truncate(filler, filler.stat().st_size - (1 << 20))
    try:
        saver._save_model()
    except VolumeError as exc:
        print("VOLUME_ERROR", exc.message)
    model.load_weights(str(path))
    same = all(np.array_equal(a, b) for a, b in zip(model.get_weights(), first))
    print("PREVIOUS_INTACT", same, sorted(p.name for p in path.parent.iterdir()))
""")


def test_a_best_epoch_save_on_a_full_volume_is_a_volume_error(tmp_path: Path, tmpfs: Any) -> None:
    with tmpfs("4m") as volume:
        (volume / "trial").mkdir()
        best, filler = volume / "trial" / "checkpoint.weights.h5", volume / "filler"
        done = subprocess.run(
            [sys.executable, "-c", BEST_EPOCH_ON_A_FULL_VOLUME, str(best), str(filler)],
            env=env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "VOLUME_ERROR checkpoint volume error: No space left on device (ENOSPC)" in out, out
    # the previous best epoch is the one on the volume, and no partial file is left
    assert "PREVIOUS_INTACT True ['checkpoint.weights.h5']" in out, out
