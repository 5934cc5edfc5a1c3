"""tf.data from TFRecord files on disk, reshuffled each iteration, resumed exactly:
under MirroredStrategy on 2 logical CPUs, SIGKILLed mid-epoch at several points, the
search ends bit-identical to an uninterrupted one, for a pipeline of unknown length and
for a repeated stream whose epochs (steps_per_epoch) cross its passes; and a plain Keras
script over tf.data trains on the same batches under the trainer as on its own."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import (
    SCRIPTS,
    assert_killed_search_matches,
    comparable,
    env,
    fit_final,
    fit_weights,
    kill_exec_when,
    results,
    start_exec,
    trial_fit,
    write_records,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_INVALID_SPEC

from tests.checkpoints import committed
from tests.forkserver import launch

SCRIPT = SCRIPTS / "tfrecord_search.py"

pytestmark = [pytest.mark.slow, pytest.mark.devices(2)]


@pytest.mark.parametrize("mode", ["pass", "stream"])
def test_tfrecord_search_resumes_exactly(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TFRECORD_MODE", mode)
    write_records(tmp_path / "records")
    # Kill points in epoch 1 or later but before a trial's last epoch ends (progress is
    # published every 2 s and at checkpoints: a point in the search's very last steps
    # can pass unseen). 8 batches a pass: "stream" epochs of 5 cross a pass at epoch 1
    # step 3, so its first kill resumes across the pass boundary.
    kills = (("0", 1), ("1", 1))
    log = assert_killed_search_matches(SCRIPT, tmp_path, kills, min_step=3)
    # The pipeline made at the top was iterated by trial 0's epochs before trial 1: a
    # process resumed in trial 1 replays them. One made per trial starts from zero.
    replayed = "iteration(s) of an input (_PrefetchDataset)" in log
    assert replayed == (mode == "pass")
    assert "not reproducible" not in log


def plain_weights(script: Path, cwd: Path) -> str:
    """The script run plainly (no tuneop): the WEIGHTS line it prints."""
    log = cwd / f"plain-{len(list(cwd.glob('plain-*.log')))}.log"
    assert launch([str(script)], env(1), log, cwd=cwd).wait(timeout=300) == 0, log.read_text()[
        -3000:
    ]
    lines = [line for line in log.read_text().splitlines() if line.startswith("WEIGHTS")]
    assert len(lines) == 1, log.read_text()[-3000:]
    return lines[0]


def test_plain_keras_fit_trains_on_the_same_batches_under_the_trainer(tmp_path: Path) -> None:
    """Plain Keras's own failing step at the end of the data races (docs/design/trainer.md,
    "Keras's end-of-data step"): under load about 1 plain run in 20 computes other weights. The
    trainer must compute what plain Keras computes when that race goes its usual way,
    so a first plain run that differs is re-run twice, and both must then agree."""
    script = SCRIPTS / "tfdata_keras_fit.py"
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    assert start_exec(script, ckpt, log, devices=1).wait(timeout=300) == EXIT_COMPLETED
    got = [line for line in log.read_text().splitlines() if line.startswith("WEIGHTS")]
    first = plain_weights(script, tmp_path)
    if got != [first]:
        again = [plain_weights(script, tmp_path) for _ in range(2)]
        assert got == [again[0]] and again[0] == again[1], (first, again, got)


def test_resume_over_fewer_records_stops_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records removed between a kill and the resume: the position in the checkpoint
    is past the data's end; the trainer says so (exit 2) instead of training on."""
    monkeypatch.delenv("TFRECORD_MODE", raising=False)
    write_records(tmp_path / "records")
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    # once a checkpoint past the 2 batches left is committed
    code = kill_exec_when(
        SCRIPT,
        ckpt,
        log,
        lambda p: (
            p.trial_id is not None
            and p.step >= 4
            and committed(ckpt / trial_fit(p.trial_id), at=(0, 3))
        ),
    )
    assert code == -signal.SIGKILL
    for shard in sorted((tmp_path / "records").glob("train-*.tfrecord"))[1:]:
        shard.unlink()  # 16 records left: 2 batches, fewer than were trained
    proc = start_exec(SCRIPT, ckpt, log)
    assert proc.wait(timeout=300) == EXIT_INVALID_SPEC, log.read_text()[-3000:]
    text = log.read_text()
    assert "its tf.data input changed since its checkpoint" in text
    assert "Traceback" not in text.split("fit 0: restored")[-1]


def test_killed_while_validating_after_the_last_batch_of_an_epoch_of_unknown_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while validating the first epoch, after its last batch (its length not
    known before): the trainer stopped Keras after that batch without Keras's failing
    end-of-data step and wrote no checkpoint there, so the resumed run trains from the
    checkpoint before it and ends bit-identical, the next trial too."""
    monkeypatch.delenv("TFRECORD_MODE", raising=False)
    write_records(tmp_path / "records")
    (tmp_path / "exec-spec.yaml").write_text(
        "checkpoint: {intervalSteps: 4, intervalSeconds: 0}\n"  # saves at step 4
    )
    ref = tmp_path / "ref"
    assert start_exec(SCRIPT, ref, tmp_path / "ref.log").wait(timeout=300) == EXIT_COMPLETED
    ckpt, log, validating = tmp_path / "ckpt", tmp_path / "log", tmp_path / "validating"
    fit = ckpt / trial_fit("0")

    def validating_after_a_checkpoint(_: Any) -> bool:
        return validating.exists() and committed(fit)

    monkeypatch.setenv("TFRECORD_SLOW_VALIDATION", str(validating))
    assert kill_exec_when(SCRIPT, ckpt, log, validating_after_a_checkpoint) == -signal.SIGKILL
    monkeypatch.delenv("TFRECORD_SLOW_VALIDATION")
    metas = [json.loads(m.read_text()) for m in fit.glob("ckpt-*/meta.json")]
    assert [(m["epoch"], m["step"]) for m in metas] == [(0, 4)]
    assert start_exec(SCRIPT, ckpt, log).wait(timeout=300) == EXIT_COMPLETED
    assert "trial 0 fit 0: restored" in log.read_text()
    assert fit_final(ckpt, trial_fit("0"))["history"] == fit_final(ref, trial_fit("0"))["history"]
    assert fit_weights(ckpt, trial_fit("0")) == fit_weights(ref, trial_fit("0"))
    assert comparable(results(ckpt)) == comparable(results(ref))
