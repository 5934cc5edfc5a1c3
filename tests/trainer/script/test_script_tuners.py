"""Script mode with GridSearch, BayesianOptimization and a user Tuner subclass whose
run_trial builds and fits the model itself (tests/trainer/scripts/tuners_search.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from trainer_helpers import SCRIPTS, comparable, kill_exec_when, results, start_exec, trial_fit
from tuneop_contract import EXIT_COMPLETED

from tests.checkpoints import committed

SCRIPT = SCRIPTS / "tuners_search.py"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["grid", "bayesian"])
def test_other_tuners_complete(kind: str, tmp_path: Path) -> None:
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    proc = start_exec(SCRIPT, ckpt, log, kind)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    res = results(ckpt)
    assert len(res["trials"]) == 3 and res["best"] is not None
    assert all(t["status"] == "COMPLETED" for t in res["trials"])


def test_custom_run_trial_is_resumed_exactly(tmp_path: Path) -> None:
    ref, log = tmp_path / "ref", tmp_path / "ref.log"
    proc = start_exec(SCRIPT, ref, log, "custom")
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    code = kill_exec_when(
        SCRIPT,
        ckpt,
        log,
        lambda p: (
            p.trial_id == "1" and p.epoch >= 2 and p.step >= 3 and committed(ckpt / trial_fit("1"))
        ),
        "custom",
    )
    assert code == -signal.SIGKILL
    proc = start_exec(SCRIPT, ckpt, log, "custom")
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert "trial 1 fit 0: restored" in log.read_text()
    assert comparable(results(ckpt)) == comparable(results(ref))
