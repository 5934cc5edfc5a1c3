"""Other tuners and inputs: GridSearch, a build(hp) function, a data loader on pythonPath."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_helpers import SCRIPTS, results, run, write_spec
from tuneop_contract import BEST_MODEL_FILE, EXIT_COMPLETED, read_progress


@pytest.mark.slow
def test_gridsearch_with_build_function_and_loader(tmp_path: Path) -> None:
    manifest = {
        "hypermodel": "tuneop_trainer.examples.emg:build_tiny_dense",
        "pythonPath": [str(SCRIPTS)],
        "data": {"loader": "user_models:load_data"},
        "tuner": {
            "algorithm": "GridSearch",
            "maxTrials": 2,
            "maxEpochs": 1,
            "batchSize": 8,
            "objective": {"name": "val_loss", "direction": "min"},
        },
    }
    spec = write_spec(tmp_path, manifest)  # a bare spec, not a manifest
    ckpt = tmp_path / "ckpt"
    assert run(spec, ckpt, tmp_path / "log") == EXIT_COMPLETED, (tmp_path / "log").read_text()
    res = results(ckpt)
    assert res["objective"] == {"name": "val_loss", "direction": "min"}
    assert [t["status"] for t in res["trials"]] == ["COMPLETED", "COMPLETED"]
    # GridSearch walks the grid in order: units 4 with both learning rates first.
    assert [t["hyperparameters"]["units"] for t in res["trials"]] == [4, 4]
    assert res["best"]["score"] == min(t["score"] for t in res["trials"])
    assert (ckpt / BEST_MODEL_FILE).stat().st_size > 0
    progress = read_progress(ckpt)
    assert progress is not None and progress.phase == "Completed"
    assert progress.trials_completed == 2 and progress.best_score == res["best"]["score"]
