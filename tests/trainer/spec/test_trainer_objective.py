"""Spec mode: an objective without a direction is optimised the way keras-tuner infers
(val_loss minimised), and a resume against different data is refused."""

from __future__ import annotations

import copy
from pathlib import Path

from trainer_helpers import results, run, tiny_spec, write_spec
from tuneop_contract import EXIT_COMPLETED, EXIT_INVALID_SPEC


def test_val_loss_is_minimised_and_changed_data_is_refused(tmp_path: Path) -> None:
    manifest = tiny_spec(
        algorithm="RandomSearch", maxTrials=3, maxEpochs=1, objective={"name": "val_loss"}
    )
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    assert run(write_spec(tmp_path, manifest), ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    res = results(ckpt)
    assert res["objective"] == {"name": "val_loss", "direction": "min"}
    scores = [t["score"] for t in res["trials"]]
    assert len(set(scores)) > 1
    assert res["best"]["score"] == min(scores)

    changed = copy.deepcopy(manifest)
    changed["spec"]["data"]["synthetic"]["seed"] = 4
    code = run(write_spec(tmp_path, changed, "changed.yaml"), ckpt, log)
    assert code == EXIT_INVALID_SPEC
    last = [x for x in log.read_text().splitlines() if x.startswith("error: ")][-1]
    assert last.startswith("error: spec.data: data changed since the search in")
