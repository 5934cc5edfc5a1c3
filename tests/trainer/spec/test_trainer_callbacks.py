"""Spec mode's callbacks: `spec.tuner.earlyStopping` (Keras's own EarlyStopping) and
`spec.tuner.callbacks` (any Keras callback by reference), their state restored with the
fit, so a trial killed mid-epoch stops at the same epoch and has the same learning-rate
history as an undisturbed one."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_helpers import (
    comparable,
    fit_final,
    kill_and_resume,
    results,
    run,
    spec_fit,
    tiny_spec,
    write_spec,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_INVALID_SPEC
from tuneop_contract.spec import CallbackSpec, EarlyStoppingSpec, SpecError
from tuneop_trainer.spec import parse


def test_parse_resolves_the_mode() -> None:
    spec = parse({"tuner": {"earlyStopping": {"monitor": "val_accuracy", "patience": 2}}})
    assert spec.job.tuner.early_stopping == EarlyStoppingSpec("val_accuracy", 2, 0.0, "max")
    with pytest.raises(SpecError, match=r"^spec.tuner.earlyStopping.mode: cannot tell"):
        parse({"tuner": {"earlyStopping": {"monitor": "my_metric"}}})
    with pytest.raises(SpecError, match=r"^spec.tuner.earlyStopping.minDelta"):
        parse({"tuner": {"earlyStopping": {"minDelta": -1}}})


def test_parse_callbacks() -> None:
    spec = parse(
        {"tuner": {"callbacks": [{"class": "keras.callbacks.ReduceLROnPlateau", "args": {"x": 1}}]}}
    )
    assert spec.job.tuner.callbacks == (
        CallbackSpec("keras.callbacks.ReduceLROnPlateau", {"x": 1}),
    )
    cases = [
        ({"callbacks": {"class": "a.B"}}, r"^spec.tuner.callbacks: must be a list"),
        ({"callbacks": ["a.B"]}, r"^spec.tuner.callbacks\[0\]: must be a mapping"),
        (
            {"callbacks": [{"class": "B"}]},
            r"^spec.tuner.callbacks\[0\].class: \"B\" is not a class",
        ),
        ({"callbacks": [{"class": "a.B", "args": [1]}]}, r"^spec.tuner.callbacks\[0\].args: must"),
        ({"callbacks": [{"class": "a.B", "kwargs": {}}]}, r"^spec.tuner.callbacks\[0\].kwargs: is"),
    ]
    for tuner, message in cases:
        with pytest.raises(SpecError, match=message):
            parse({"tuner": tuner})


@pytest.mark.parametrize(
    ("callback", "says"),
    [
        ({"class": "keras.callbacks.NoSuch"}, 'callbacks[0].class: module "keras.callbacks" has'),
        ({"class": "keras.layers.Dense"}, "callbacks[0].class: keras.layers.Dense is not a keras"),
        (
            {"class": "keras.callbacks.BackupAndRestore"},
            "callbacks[0].class: keras.callbacks.Backup",
        ),
        (
            {"class": "keras.callbacks.ReduceLROnPlateau", "args": {"factor": 2}},
            "callbacks[0].args: ReduceLROnPlateau(**{'factor': 2}) raised ValueError",
        ),
    ],
)
def test_a_callback_that_cannot_be_made_is_refused(
    callback: dict[str, object], says: str, tmp_path: Path
) -> None:
    spec = write_spec(tmp_path, tiny_spec(callbacks=[callback]))
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    assert run(spec, ckpt, log) == EXIT_INVALID_SPEC
    text = log.read_text()
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"spec.tuner.{says}" in errors[0], text[-2000:]
    assert "Traceback" not in text
    assert not (ckpt / "trials").exists()  # refused before any training


@pytest.mark.slow
def test_a_killed_trial_stops_at_the_same_epoch_with_the_same_learning_rates(
    tmp_path: Path,
) -> None:
    # halves the rate after every epoch that did not improve val_loss by 0.05 (its state,
    # the best so far, decides); the history holds each epoch's rate before its change
    reduce_lr = {"monitor": "val_loss", "factor": 0.5, "patience": 0, "min_delta": 0.05}
    manifest = tiny_spec(
        algorithm="RandomSearch",
        maxTrials=2,
        maxEpochs=8,
        earlyStopping={"monitor": "val_loss", "patience": 2, "minDelta": 0.02},
        callbacks=[{"class": "keras.callbacks.ReduceLROnPlateau", "args": reduce_lr}],
    )
    spec = write_spec(tmp_path, manifest)
    ref, log = tmp_path / "ref", tmp_path / "ref.log"
    assert run(spec, ref, log) == EXIT_COMPLETED, log.read_text()[-3000:]

    def epochs(ckpt: Path, trial: str) -> int:
        return len(fit_final(ckpt, spec_fit(trial))["history"]["val_loss"])

    stopped = [epochs(ref, t["trialId"]) for t in results(ref)["trials"]]
    assert any(n < 8 for n in stopped), stopped
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    first = results(ref)["trials"][0]["trialId"]
    kill_and_resume(spec, ckpt, log, lambda p: p.trial_id == first and p.epoch >= 1 and p.step >= 3)
    assert comparable(results(ckpt)) == comparable(results(ref))
    assert [epochs(ckpt, t["trialId"]) for t in results(ckpt)["trials"]] == stopped
    rates = [rates_of(ref, t["trialId"]) for t in results(ref)["trials"]]
    assert any(len(set(r)) > 1 for r in rates), rates  # the callback reduced a rate
    assert [rates_of(ckpt, t["trialId"]) for t in results(ckpt)["trials"]] == rates


def rates_of(ckpt: Path, trial: str) -> list[float]:
    return list(fit_final(ckpt, spec_fit(trial))["history"]["learning_rate"])
