"""Spec mode's `spec.tuner.earlyStopping`: Keras semantics, decided from the saved
history, so a trial killed mid-epoch stops at the same epoch as an undisturbed one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trainer_helpers import comparable, kill_and_resume, results, run, tiny_spec, write_spec
from tuneop_contract import EXIT_COMPLETED
from tuneop_trainer.early_stopping import should_stop
from tuneop_trainer.spec import EarlyStoppingSpec, SpecError, parse


@pytest.mark.parametrize(
    ("values", "patience", "delta", "mode", "stop"),
    [
        ([1.0, 0.9, 0.8], 1, 0.0, "min", False),
        ([1.0, 1.0], 1, 0.0, "min", True),
        ([1.0, 0.97, 0.95], 2, 0.05, "min", True),
        ([1.0, 0.97], 2, 0.05, "min", False),
        ([0.5, 0.6, 0.6], 1, 0.0, "max", True),
        ([0.5], 0, 0.0, "max", False),  # never after the first epoch (Keras: epoch > 0)
        ([0.5, 0.6], 0, 0.0, "max", False),
    ],
)
def test_should_stop_follows_keras(
    values: list[float], patience: int, delta: float, mode: str, stop: bool
) -> None:
    rule = EarlyStoppingSpec(monitor="m", patience=patience, min_delta=delta, mode=mode)
    assert should_stop(values, rule) is stop


def test_parse_resolves_the_mode() -> None:
    spec = parse({"tuner": {"earlyStopping": {"monitor": "val_accuracy", "patience": 2}}})
    assert spec.tuner.early_stopping == EarlyStoppingSpec("val_accuracy", 2, 0.0, "max")
    with pytest.raises(SpecError, match=r"^spec.tuner.earlyStopping.mode: cannot tell"):
        parse({"tuner": {"earlyStopping": {"monitor": "my_metric"}}})
    with pytest.raises(SpecError, match=r"^spec.tuner.earlyStopping.minDelta"):
        parse({"tuner": {"earlyStopping": {"minDelta": -1}}})


@pytest.mark.slow
def test_a_killed_trial_stops_at_the_same_epoch(tmp_path: Path) -> None:
    manifest = tiny_spec(
        algorithm="RandomSearch",
        maxTrials=2,
        maxEpochs=8,
        earlyStopping={"monitor": "val_loss", "patience": 1, "minDelta": 0.02},
    )
    spec = write_spec(tmp_path, manifest)
    ref, log = tmp_path / "ref", tmp_path / "ref.log"
    assert run(spec, ref, log) == EXIT_COMPLETED, log.read_text()[-3000:]

    def epochs(ckpt: Path, trial: str) -> int:
        done = json.loads((ckpt / "trials" / trial / "exec-0" / "done.json").read_text())
        return len(done["history"]["val_loss"])

    stopped = [epochs(ref, t["trialId"]) for t in results(ref)["trials"]]
    assert any(n < 8 for n in stopped), stopped
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    first = results(ref)["trials"][0]["trialId"]
    kill_and_resume(spec, ckpt, log, lambda p: p.trial_id == first and p.epoch >= 1 and p.step >= 3)
    assert comparable(results(ckpt)) == comparable(results(ref))
    assert [epochs(ckpt, t["trialId"]) for t in results(ckpt)["trials"]] == stopped
