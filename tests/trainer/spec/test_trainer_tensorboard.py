"""Spec mode's `spec.tuner.tensorboard: true`: a run per trial execution in keras-tuner's
layout (DIR/tensorboard/<trial>/execution0, HParams there, epoch metrics in train/ and
validation/ named as Keras's TensorBoard callback names them), and a search killed
mid-epoch (SIGKILL) and in a later trial (SIGTERM) has the uninterrupted run's event
files, every epoch once, bit for bit. (A kill between an epoch's summaries and its
checkpoint is too narrow to aim at here: the rewind itself is
tests/unit/test_trainer_event_logs.py.)"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from trainer_helpers import (
    events,
    kill_when,
    once_each,
    results,
    run,
    spec_fit,
    tiny_spec,
    write_spec,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_PREEMPTED, TENSORBOARD_DIR, Progress
from tuneop_contract.spec import SpecError
from tuneop_trainer.spec import parse

from tests.checkpoints import committed

pytestmark = pytest.mark.slow

MANIFEST = tiny_spec(algorithm="RandomSearch", maxTrials=3, maxEpochs=3, tensorboard=True)


def test_the_field_is_a_boolean() -> None:
    assert parse({"tuner": {"tensorboard": True}}).job.tuner.tensorboard is True
    assert parse({"tuner": {}}).job.tuner.tensorboard is False
    with pytest.raises(SpecError, match=r"^spec.tuner.tensorboard: \"yes\" must be true or false"):
        parse({"tuner": {"tensorboard": "yes"}})


def test_killed_search_logs_each_epoch_once(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, MANIFEST)
    ref, log = tmp_path / "ref", tmp_path / "ref.log"
    assert run(spec, ref, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    runs = events(ref / TENSORBOARD_DIR)
    trials = sorted(str(t["trialId"]) for t in results(ref)["trials"])  # in the order run
    for trial in trials:
        base = f"{trial}/execution0"
        tags = [tag for tag, _, _ in runs[base]]
        assert tags == ["_hparams_/session_start_info", "_hparams_/session_end_info"], tags
        for sub in ("train", "validation"):
            steps = [step for tag, step, _ in runs[f"{base}/{sub}"] if tag == "epoch_accuracy"]
            assert steps == [0, 1, 2], (base, sub, steps)
    assert once_each(runs) == {}

    ckpt, log = tmp_path / "ckpt", tmp_path / "run.log"

    def mid_epoch(p: Progress) -> bool:  # with a checkpoint to restore
        return (
            p.trial_id == trials[1]
            and p.epoch == 1
            and p.step >= 4
            and committed(ckpt / spec_fit(trials[1]))
        )

    assert kill_when(spec, ckpt, log, mid_epoch) == -signal.SIGKILL
    code = kill_when(
        spec, ckpt, log, lambda p: p.trial_id == trials[2] and p.epoch == 1, sig=signal.SIGTERM
    )
    assert code == EXIT_PREEMPTED, log.read_text()[-3000:]
    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert log.read_text().count("restored") >= 2
    assert events(ckpt / TENSORBOARD_DIR) == runs
