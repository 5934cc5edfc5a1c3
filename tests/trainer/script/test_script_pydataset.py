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
    assert_killed_search_matches,
    fit_final,
    kill_exec_when,
    start_exec,
)
from tuneop_contract import EXIT_COMPLETED

from tests.checkpoints import committed

pytestmark = [pytest.mark.slow, pytest.mark.devices(2)]

FINAL_FIT = "fits/fit-0"  # generator_fit.py's fit, outside any trial


def test_pydataset_resumes_at_its_batch_exactly(tmp_path: Path) -> None:
    kills = (("0", 1), ("1", 2))
    text = assert_killed_search_matches(
        SCRIPTS / "pydataset_search.py", tmp_path, kills, min_step=7
    )
    for trial, epoch in kills:  # mid-epoch checkpoints: not back at the epoch start
        restored = [line for line in text.splitlines() if f"trial {trial} fit 0: restored" in line]
        assert f"at epoch {epoch} step 0" not in restored[0], restored


def test_generator_resumes_at_the_epoch_start_with_a_warning(tmp_path: Path) -> None:
    script = SCRIPTS / "generator_fit.py"
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    # once epoch 0's end is committed (a generator has no mid-epoch checkpoints)
    code = kill_exec_when(
        script,
        ckpt,
        log,
        lambda p: p.epoch >= 1 and p.step >= 4 and committed(ckpt / FINAL_FIT, at=(1, 0)),
    )
    assert code == -signal.SIGKILL
    proc = start_exec(script, ckpt, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    assert "input is generator: resumes at the epoch start" in text
    restored = [line for line in text.splitlines() if "fit 0: restored" in line]
    assert restored and " step 0 in " in restored[0], restored  # an epoch start
    assert " at epoch 0 " not in restored[0]  # the epoch-end checkpoint of epoch 0 or later
    assert len(fit_final(ckpt, FINAL_FIT)["history"]["loss"]) == 3
