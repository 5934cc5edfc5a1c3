"""Script mode on the seed document's own script (tests/trainer/scripts/seed_search.py:
module-level MirroredStrategy, `distribution_strategy=strategy`, no scope in build,
EarlyStopping, validation_data, then get_best_models and a final fit in the scope):
killed at several points and SIGTERMed once, it ends exactly as an uninterrupted run.
Its Hyperband promotions start a fresh optimizer, as under plain keras-tuner, unless
`--continue-optimizer-state` (spec.script.continueOptimizerState) says otherwise."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
from trainer_helpers import (
    CONTINUING,
    SCRIPTS,
    comparable,
    final_iteration,
    fit_final,
    fit_weights,
    kill_exec_when,
    optimizer_in_weights_file,
    results,
    start_exec,
    trial_fit,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_INVALID_SPEC, EXIT_PREEMPTED

from tests.checkpoints import committed

SEED = SCRIPTS / "seed_search.py"

pytestmark = [pytest.mark.slow, pytest.mark.devices(2)]


def _mid_trial(trial: str, step: int = 2):
    return lambda p: p.trial_id == trial and p.step >= step


def _mid_trial_committed(ckpt: Path, trial: str, step: int = 2):
    """Mid-trial once the trial's (or the final fit's) fit has a checkpoint committed:
    a SIGKILL there leaves it one to restore."""
    fit = ckpt / "fits" / trial if trial.startswith("fit-") else ckpt / trial_fit(trial, 0, "emg")
    return lambda p: p.trial_id == trial and p.step >= step and committed(fit)


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
    assert kill_exec_when(SEED, ckpt, log, _mid_trial_committed(ckpt, "0000")) == -signal.SIGKILL
    promoted = next(t["trialId"] for t in results(reference)["trials"] if t["continuesTrial"])
    code = kill_exec_when(SEED, ckpt, log, _mid_trial_committed(ckpt, promoted, 3))
    assert code == -signal.SIGKILL
    last = results(reference)["trials"][-1]["trialId"]
    code = kill_exec_when(SEED, ckpt, log, _mid_trial(last, 3), sig=signal.SIGTERM)
    assert code == EXIT_PREEMPTED, log.read_text()[-3000:]
    code = kill_exec_when(SEED, ckpt, log, _mid_trial_committed(ckpt, "fit-0", 4))
    assert code == -signal.SIGKILL
    proc = start_exec(SEED, ckpt, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]

    assert comparable(results(ckpt)) == comparable(results(reference))
    assert fit_weights(ckpt, "fits/fit-0") == fit_weights(reference, "fits/fit-0")
    text = log.read_text()
    assert "exiting 75 (preempted)" in text
    assert "fit 0: restored" in text  # the final fit resumed from its own checkpoint
    progress = json.loads((ckpt / "progress.json").read_text())
    assert progress["restores"] >= 4 and progress["phase"] == "Completed"


CONTINUE = ("--continue-optimizer-state",)


def _promotion(ckpt: Path) -> tuple[str, str]:
    """(a promoted trial, the trial it continues) of the search in `ckpt`."""
    promoted = next(t for t in results(ckpt)["trials"] if t["continuesTrial"])
    return promoted["trialId"], promoted["continuesTrial"]


def _trained_steps(ckpt: Path, trial: str) -> int:
    epochs = len(fit_final(ckpt, trial_fit(trial, project="emg"))["epochsDone"])
    return 12 * epochs  # 96 training samples in batches of 8


def test_a_promotion_starts_a_fresh_optimizer_as_plain_keras_tuner_does(reference: Path) -> None:
    """Without the option a promoted trial's optimizer counts only its own steps."""
    trial, previous = _promotion(reference)
    assert (
        optimizer_in_weights_file(
            reference / "tuner" / "emg" / f"trial_{previous}" / "checkpoint.weights.h5"
        )[0]
        > 0
    )
    fit = trial_fit(trial, project="emg")
    assert final_iteration(reference, fit) == _trained_steps(reference, trial)


@pytest.fixture(scope="module")
def continuing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ckpt = tmp_path_factory.mktemp("continuing") / "ckpt"
    proc = start_exec(SEED, ckpt, ckpt.parent / "log", options=CONTINUE)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, (ckpt.parent / "log").read_text()[-3000:]
    return ckpt


def test_continue_optimizer_state_killed_after_a_promotion_ends_bit_identical(
    continuing: Path, tmp_path: Path
) -> None:
    """With the option, a promotion SIGKILLed just after it started continues the previous
    round's optimizer (iteration count and slots of its weights file) before and after
    the kill, and the search ends as the uninterrupted one with the option."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    trial, previous = _promotion(continuing)
    code = kill_exec_when(SEED, ckpt, log, _mid_trial(trial, 1), options=CONTINUE)
    assert code == -signal.SIGKILL
    proc = start_exec(SEED, ckpt, log, options=CONTINUE)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert comparable(results(ckpt)) == comparable(results(continuing))
    assert fit_weights(ckpt, "fits/fit-0") == fit_weights(continuing, "fits/fit-0")

    weights = ckpt / "tuner" / "emg" / f"trial_{previous}" / "checkpoint.weights.h5"
    iteration, slots = optimizer_in_weights_file(weights)
    continued = [c for c in CONTINUING.findall(log.read_text()) if c[0] == previous]
    assert len(continued) >= 2, continued  # before the kill and in the resumed process
    assert set(continued) == {(previous, str(iteration), slots)}
    fit = trial_fit(trial, project="emg")
    assert final_iteration(ckpt, fit) == iteration + _trained_steps(ckpt, trial)


def test_the_option_is_part_of_the_search(continuing: Path, tmp_path: Path) -> None:
    """A search started with the option is not resumed without it (exit 2, named)."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    shutil.copytree(continuing, ckpt)
    proc = start_exec(SEED, ckpt, log)
    assert proc.wait(timeout=120) == EXIT_INVALID_SPEC
    assert "continueOptimizerState" in log.read_text().strip().splitlines()[-1]
