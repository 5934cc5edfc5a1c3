"""Spec mode over a loader's `tf.data` datasets: TFRecord files, reshuffled at every
iteration, of unknown length. SIGKILLed mid-epoch in two trials and resumed, the search
ends identical to an uninterrupted one (scores, best weights); a loader returning
something else stops with one line naming spec.data.loader (exit 2)."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import (
    SCRIPTS,
    comparable,
    fit_final,
    kill_when,
    results,
    run,
    spec_fit,
    write_records,
    write_spec,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_INVALID_SPEC

from tests.checkpoints import committed

pytestmark = [pytest.mark.slow, pytest.mark.devices(2)]


def manifest(loader: str = "load") -> dict[str, Any]:
    return {
        "hypermodel": "user_data_tfrecord:build",
        "pythonPath": [str(SCRIPTS)],
        "data": {"loader": f"user_data_tfrecord:{loader}"},
        "tuner": {
            "algorithm": "RandomSearch",
            "maxTrials": 2,
            "maxEpochs": 3,
            "seed": 2,
            "deterministic": True,
            "objective": {"name": "val_loss", "direction": "min"},
        },
        "checkpoint": {"intervalSteps": 3, "intervalSeconds": 0, "keep": 2},
    }


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("records")
    write_records(path)  # 64 training records: 8 batches an epoch
    return path


@pytest.fixture(scope="module")
def reference(records: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The search never interrupted: its checkpoint directory."""
    tmp = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("USER_RECORDS", str(records))
        spec, log = write_spec(tmp, manifest()), tmp / "log"
        assert run(spec, tmp / "ckpt", log) == EXIT_COMPLETED, log.read_text()[-3000:]
    return tmp / "ckpt"


def test_killed_search_over_tfrecords_resumes_exactly(
    records: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USER_RECORDS", str(records))
    spec = write_spec(tmp_path, manifest())
    expected = results(reference)
    first, second = (t["trialId"] for t in expected["trials"])
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    # Mid-epoch after a checkpoint (every 3 steps): in trial 0's second epoch, whose
    # length was learnt in the first; in trial 1's first epoch, after trial 0's
    # iterations (the resumed process replays them).
    for trial, epoch in ((first, 1), (second, 0)):
        code = kill_when(
            spec,
            ckpt,
            log,
            lambda p, t=trial, e=epoch: (
                p.trial_id == t
                and p.epoch == e
                and p.step >= 4
                and committed(ckpt / spec_fit(t), at=(e, 3))
            ),
        )
        assert code == -signal.SIGKILL
    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    assert text.count("fit 0: restored ckpt-") == 2, text[-3000:]
    assert "replaying" in text  # trial 1 resumed in a new process: trial 0's iterations
    got = results(ckpt)
    assert comparable(got) == comparable(expected)
    assert got["best"]["trialId"] == expected["best"]["trialId"]
    assert got["best"]["weightsSha256"] == expected["best"]["weightsSha256"]


def test_killed_while_validating_after_the_last_batch_of_an_epoch_of_unknown_length(
    records: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints every 4 steps, killed while validating the first epoch (its length
    not known before its end): no checkpoint was written after its last batch (Keras
    was stopped there, without its failing end-of-data step), so the run resumes at
    step 4 and ends bit-identical, every epoch's training metrics too."""
    monkeypatch.setenv("USER_RECORDS", str(records))
    m = manifest()
    m["checkpoint"]["intervalSteps"] = 4
    spec = write_spec(tmp_path, m)
    ckpt, log, validating = tmp_path / "ckpt", tmp_path / "log", tmp_path / "validating"
    expected = results(reference)
    first = expected["trials"][0]["trialId"]
    execution = ckpt / spec_fit(first)

    def validating_after_a_checkpoint(_: Any) -> bool:
        return validating.exists() and committed(execution)

    monkeypatch.setenv("USER_SLOW_VALIDATION", str(validating))
    assert kill_when(spec, ckpt, log, validating_after_a_checkpoint) == -signal.SIGKILL
    monkeypatch.delenv("USER_SLOW_VALIDATION")
    metas = [json.loads(m.read_text()) for m in execution.glob("ckpt-*/meta.json")]
    assert [(meta["epoch"], meta["step"]) for meta in metas] == [(0, 4)]
    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert re.search(r"fit 0: restored ckpt-\d+ at epoch 0 step 4 ", log.read_text())
    got = results(ckpt)
    assert comparable(got) == comparable(expected)
    assert got["best"]["weightsSha256"] == expected["best"]["weightsSha256"]
    # Every epoch's training metrics too, as the uninterrupted run reported them.
    history = fit_final(ckpt, spec_fit(first))["history"]
    assert history == fit_final(reference, spec_fit(first))["history"]


@pytest.mark.parametrize(
    ("loader", "says"),
    [
        ("one_dataset", "returned a _PrefetchDataset; expected"),
        ("not_pairs", "the training dataset's elements are {"),
    ],
)
def test_a_loader_returning_other_datasets_exits_2_naming_the_field(
    loader: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_records(tmp_path / "records", files=1, per_file=8)
    monkeypatch.setenv("USER_RECORDS", str(tmp_path / "records"))
    spec, log = write_spec(tmp_path, manifest(loader)), tmp_path / "log"
    assert run(spec, tmp_path / "ckpt", log) == EXIT_INVALID_SPEC
    errors = [line for line in log.read_text().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: spec.data.loader: "), errors
    assert says in errors[0]
    assert "Traceback" not in log.read_text()


def test_shapes_and_digest_come_from_the_element_spec(
    records: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tensorflow as tf
    from tuneop_contract.spec import DataSpec, SpecError
    from tuneop_trainer.data.sources import StreamData, load
    from tuneop_trainer.modes.tuningjob import resolve_hypermodel

    monkeypatch.setenv("USER_RECORDS", str(records))
    monkeypatch.syspath_prepend(str(SCRIPTS))
    spec = DataSpec(synthetic_samples=None, loader="user_data_tfrecord:load")
    data = load(spec)
    assert isinstance(data, StreamData) and data.input_shape == [6]
    assert data.digest() == load(spec).digest()  # the data is not read: nothing drawn
    # Sparse labels hold no class count: only a HyperModel asking for it is refused.
    with pytest.raises(SpecError, match=r"^spec.data.loader: .*sparse labels"):
        resolve_hypermodel("tuneop_trainer.examples.emg:TinyCNNHyperModel", data)
    hot = StreamData(data.train.map(lambda x, y: (x, tf.one_hot(y, 2))), data.validation, "m:f")
    assert hot.output_shape == [2] and hot.digest() != data.digest()
