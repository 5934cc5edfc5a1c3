"""Script mode on the seed document's own script (tests/trainer/scripts/seed_search.py:
module-level MirroredStrategy, `distribution_strategy=strategy`, no scope in build,
EarlyStopping, validation_data, then get_best_models and a final fit in the scope):
killed at several points and SIGTERMed once, it ends exactly as an uninterrupted run."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from trainer_helpers import (
    SCRIPTS,
    comparable,
    fit_weights,
    kill_exec_when,
    results,
    start_exec,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_PREEMPTED

SEED = SCRIPTS / "seed_search.py"

pytestmark = [pytest.mark.slow, pytest.mark.devices(2)]


def _mid_trial(trial: str, step: int = 2):
    return lambda p: p.trial_id == trial and p.step >= step


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ckpt = tmp_path_factory.mktemp("ref") / "ckpt"
    proc = start_exec(SEED, ckpt, ckpt.parent / "log")
    assert proc.wait(timeout=300) == EXIT_COMPLETED, (ckpt.parent / "log").read_text()[-3000:]
    return ckpt


def test_uninterrupted_run_records_the_search_and_the_final_fit(reference: Path) -> None:
    res = results(reference)
    assert res["objective"] == {"name": "accuracy", "direction": "max"}
    assert len(res["trials"]) >= 5
    assert all(t["status"] == "COMPLETED" for t in res["trials"])
    # keras-tuner's project lives on the volume, whatever directory= the script said
    assert (reference / "tuner" / "emg" / "oracle.json").exists()
    assert not (reference.parent / "my_dir").exists()
    assert fit_weights(reference, "fits/fit-0")


def test_killed_at_several_points_ends_bit_identical(reference: Path, tmp_path: Path) -> None:
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    # first trial, mid-epoch; a promoted Hyperband trial; SIGTERM; the final fit
    assert kill_exec_when(SEED, ckpt, log, _mid_trial("0000")) == -signal.SIGKILL
    promoted = next(t["trialId"] for t in results(reference)["trials"] if t["continuesTrial"])
    assert kill_exec_when(SEED, ckpt, log, _mid_trial(promoted, 3)) == -signal.SIGKILL
    last = results(reference)["trials"][-1]["trialId"]
    code = kill_exec_when(SEED, ckpt, log, _mid_trial(last, 3), sig=signal.SIGTERM)
    assert code == EXIT_PREEMPTED, log.read_text()[-3000:]
    assert kill_exec_when(SEED, ckpt, log, _mid_trial("fit-0", 4)) == -signal.SIGKILL
    proc = start_exec(SEED, ckpt, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]

    assert comparable(results(ckpt)) == comparable(results(reference))
    assert fit_weights(ckpt, "fits/fit-0") == fit_weights(reference, "fits/fit-0")
    text = log.read_text()
    assert "exiting 75 (preempted)" in text
    assert "fit 0: restored" in text  # the final fit resumed from its own checkpoint
    progress = json.loads((ckpt / "progress.json").read_text())
    assert progress["restores"] >= 4 and progress["phase"] == "Completed"
