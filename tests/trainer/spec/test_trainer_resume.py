"""Exact resume: kills at several points give the same search as no kill at all."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from trainer_helpers import (
    CONTINUING,
    comparable,
    final_iteration,
    fit_final,
    kill_when,
    optimizer_in_weights_file,
    results,
    run,
    spec_fit,
    tiny_spec,
    write_spec,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_PREEMPTED, read_progress

from tests.checkpoints import committed

pytestmark = [pytest.mark.slow, pytest.mark.devices(2)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same search, never interrupted."""
    tmp = tmp_path_factory.mktemp("reference")
    spec = write_spec(tmp, tiny_spec())
    assert run(spec, tmp / "ckpt", tmp / "log") == EXIT_COMPLETED, (tmp / "log").read_text()
    return results(tmp / "ckpt")


def test_sigkill_at_several_points_resumes_exactly(reference: dict, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, tiny_spec())
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    promoted = [t["trialId"] for t in reference["trials"] if t["continuesTrial"]]
    assert promoted, "the tiny Hyperband search must contain a promotion"
    first, last = reference["trials"][0]["trialId"], reference["trials"][-1]["trialId"]
    kill_points = [
        # during the very first trial, mid-epoch (before keras-tuner wrote anything itself)
        lambda p: p.trial_id == first and p.step >= 3 and committed(ckpt / spec_fit(first)),
        # during a Hyperband promotion, in its second epoch
        lambda p: (
            p.trial_id == promoted[0]
            and p.epoch >= 1
            and p.step >= 3
            and committed(ckpt / spec_fit(promoted[0]))
        ),
        # during the last trial, once it has a checkpoint of its own
        lambda p: p.trial_id == last and p.step >= 1 and committed(ckpt / spec_fit(last)),
    ]
    for i, point in enumerate(kill_points):
        code = kill_when(spec, ckpt, log, point, delay=0.2 * i)
        assert code == -signal.SIGKILL
    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    got = results(ckpt)
    assert comparable(got) == comparable(reference)
    assert got["best"]["trialId"] == reference["best"]["trialId"]
    assert got["best"]["weightsSha256"] == reference["best"]["weightsSha256"]
    progress = read_progress(ckpt)
    assert progress is not None and progress.phase == "Completed"
    assert progress.restores >= 3
    assert progress.trials_completed == progress.trials_total == len(reference["trials"])
    assert "restored ckpt-" in log.read_text()


def test_sigterm_loses_at_most_the_current_step(reference: dict, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, tiny_spec())
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    first = reference["trials"][0]["trialId"]
    code = kill_when(spec, ckpt, log, lambda p: p.trial_id == first and p.step >= 3, signal.SIGTERM)
    assert code == EXIT_PREEMPTED
    stopped = read_progress(ckpt)
    assert stopped is not None and stopped.phase == "Preempted"
    # The preemption checkpoint is at the step the trainer was in when the signal came
    # (or at the epoch end, if the signal came during validation).
    assert stopped.last_checkpoint_time is not None
    saved_at = (stopped.epoch, stopped.step)
    text = log.read_text()
    if "preempted: " in text and " checkpointed at epoch" in text:
        assert f"checkpointed at epoch {saved_at[0]} step {saved_at[1]}\n" in text
    assert run(spec, ckpt, log) == EXIT_COMPLETED
    text = log.read_text()
    # The resumed run starts exactly there: nothing but the interrupted step is redone.
    assert re.search(rf"restored ckpt-\d+ at epoch {saved_at[0]} step {saved_at[1]} ", text)
    got = results(ckpt)
    assert comparable(got) == comparable(reference)
    assert got["best"]["weightsSha256"] == reference["best"]["weightsSha256"]


def test_a_promoted_trial_continues_the_optimizer_state(reference: dict, tmp_path: Path) -> None:
    """Spec mode: a Hyperband promotion, SIGKILLed just after it started, continues the
    previous round's best epoch with its optimizer (iteration count and slots, as in its
    weights file) and ends as the uninterrupted search."""
    spec = write_spec(tmp_path, tiny_spec())
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    promoted = next(t for t in reference["trials"] if t["continuesTrial"])
    trial, previous = promoted["trialId"], promoted["continuesTrial"]
    code = kill_when(spec, ckpt, log, lambda p: p.trial_id == trial and p.step >= 1)
    assert code == -signal.SIGKILL
    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    got = results(ckpt)
    assert comparable(got) == comparable(reference)
    assert got["best"]["weightsSha256"] == reference["best"]["weightsSha256"]

    weights = ckpt / "tuner" / "search" / f"trial_{previous}" / "checkpoint.weights.h5"
    iteration, slots = optimizer_in_weights_file(weights)
    assert iteration > 0
    continued = CONTINUING.findall(log.read_text())
    assert len(continued) >= 2, continued  # before the kill and in the resumed process
    assert {c for c in continued if c[0] == previous} == {(previous, str(iteration), slots)}
    meta = fit_final(ckpt, spec_fit(trial))
    steps = 8 * len(meta["epochsDone"])  # 64 training samples in batches of 8
    assert final_iteration(ckpt, spec_fit(trial)) == iteration + steps
