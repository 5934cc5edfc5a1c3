"""A `keras.utils.PyDataset` input resumes at the checkpointed batch: the trainer picks
its batches (a seeded batch order) and replays its epoch hooks, so a PyDataset that
reshuffles its samples in `on_epoch_end` with its own RNG, killed mid-epoch in two
trials, ends bit-identical to an uninterrupted search. A generator resumes at the start
of the interrupted epoch, with a warning saying so."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from trainer_helpers import (
    SCRIPTS,
    comparable,
    fit_final,
    fit_weights,
    kill_exec_when,
    results,
    start_exec,
)
from tuneop_contract import EXIT_COMPLETED

pytestmark = pytest.mark.slow


def test_pydataset_resumes_at_its_batch_exactly(tmp_path: Path) -> None:
    script = SCRIPTS / "pydataset_search.py"
    ref, log = tmp_path / "ref", tmp_path / "ref.log"
    proc = start_exec(script, ref, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert "exact only if" not in log.read_text()  # no inexact-resume warning
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    for trial, epoch in (("0", 1), ("1", 2)):
        code = kill_exec_when(
            script,
            ckpt,
            log,
            lambda p, t=trial, e=epoch: p.trial_id == t and p.epoch >= e and p.step >= 7,
        )
        assert code == -signal.SIGKILL
    proc = start_exec(script, ckpt, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    for trial, epoch in (("0", 1), ("1", 2)):
        restored = [line for line in text.splitlines() if f"trial {trial} fit 0: restored" in line]
        assert restored and f"at epoch {epoch} step 0" not in restored[0], restored
    assert comparable(results(ckpt)) == comparable(results(ref))
    for trial in ("0", "1"):
        fit = f"trials/{trial}/fit-0"
        assert fit_final(ckpt, fit)["history"] == fit_final(ref, fit)["history"]
        assert fit_weights(ckpt, fit) == fit_weights(ref, fit)


def test_generator_resumes_at_the_epoch_start_with_a_warning(tmp_path: Path) -> None:
    script = SCRIPTS / "generator_fit.py"
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    code = kill_exec_when(script, ckpt, log, lambda p: p.epoch >= 1 and p.step >= 4)
    assert code == -signal.SIGKILL
    proc = start_exec(script, ckpt, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    assert "input is generator: resumes at the epoch start" in text
    assert "fit 0: restored" in text, text[-3000:]
    assert "at epoch 1 step 0" in text
    assert len(fit_final(ckpt, "fits/fit-0")["history"]["loss"]) == 3
