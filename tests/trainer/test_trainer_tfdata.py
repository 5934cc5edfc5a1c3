"""Spec mode over a loader's `tf.data` datasets: TFRecord files, reshuffled at every
iteration, of unknown length. SIGKILLed mid-epoch in two trials and resumed, the search
ends identical to an uninterrupted one (scores, best weights); a loader returning
something else stops with one line naming spec.data.loader (exit 2)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import comparable, kill_when, results, run, write_records, write_spec
from tuneop_contract import EXIT_COMPLETED, EXIT_INVALID_SPEC

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent


def manifest(loader: str = "load") -> dict[str, Any]:
    return {
        "hypermodel": "user_data_tfrecord:build",
        "pythonPath": [str(HERE)],
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


def test_killed_search_over_tfrecords_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_records(tmp_path / "records")  # 64 training records: 8 batches an epoch
    monkeypatch.setenv("USER_RECORDS", str(tmp_path / "records"))
    spec = write_spec(tmp_path, manifest())
    ref, log = tmp_path / "ref", tmp_path / "ref.log"
    assert run(spec, ref, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    reference = results(ref)
    first, second = (t["trialId"] for t in reference["trials"])
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    # Mid-epoch after a checkpoint (every 3 steps): in trial 0's second epoch, whose
    # length was learnt in the first; in trial 1's first epoch, after trial 0's
    # iterations (the resumed process replays them).
    for trial, epoch in ((first, 1), (second, 0)):
        code = kill_when(
            spec,
            ckpt,
            log,
            lambda p, t=trial, e=epoch: p.trial_id == t and p.epoch == e and p.step >= 4,
        )
        assert code == -signal.SIGKILL
    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    assert text.count("execution 0: restored ckpt-") == 2, text[-3000:]
    assert "replaying" in text  # trial 1 resumed in a new process: trial 0's iterations
    got = results(ckpt)
    assert comparable(got) == comparable(reference)
    assert got["best"]["trialId"] == reference["best"]["trialId"]
    assert got["best"]["weightsSha256"] == reference["best"]["weightsSha256"]


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
