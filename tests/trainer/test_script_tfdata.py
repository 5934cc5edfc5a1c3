"""A tf.data input (shuffle with reshuffle_each_iteration, map, batch, prefetch) is
iterated by the trainer, so a resumed fit sees the same batches in the same order as an
uninterrupted one: killed mid-epoch in two trials, the search ends bit-identical."""

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

SCRIPT = SCRIPTS / "tfdata_search.py"

pytestmark = pytest.mark.slow


def test_tfdata_resumes_exactly(tmp_path: Path) -> None:
    ref, log = tmp_path / "ref", tmp_path / "ref.log"
    proc = start_exec(SCRIPT, ref, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert "exact only if" not in log.read_text()  # no inexact-resume warning
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    for trial, epoch in (("0", 1), ("1", 2)):
        code = kill_exec_when(
            SCRIPT,
            ckpt,
            log,
            lambda p, t=trial, e=epoch: p.trial_id == t and p.epoch >= e and p.step >= 3,
        )
        assert code == -signal.SIGKILL
    proc = start_exec(SCRIPT, ckpt, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    assert "trial 0 fit 0: restored" in text and "trial 1 fit 0: restored" in text
    assert comparable(results(ckpt)) == comparable(results(ref))
    for trial in ("0", "1"):
        fit = f"trials/{trial}/fit-0"
        assert fit_final(ckpt, fit)["history"] == fit_final(ref, fit)["history"]
        assert fit_weights(ckpt, fit) == fit_weights(ref, fit)
