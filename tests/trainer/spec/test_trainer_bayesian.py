"""BayesianOptimization: keras-tuner's Gaussian-process oracle (needs scipy) runs a search
through the trainer and its results agree with progress."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_helpers import results, run, write_spec
from tuneop_contract import EXIT_COMPLETED, read_progress


@pytest.mark.slow
def test_bayesian_optimization_completes(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        {
            "hypermodel": "tuneop_trainer.examples.emg:build_tiny_dense",
            "data": {"synthetic": {"samples": 64, "seed": 1}},
            "tuner": {
                "algorithm": "BayesianOptimization",
                "maxTrials": 3,
                "maxEpochs": 1,
                "batchSize": 16,
                "seed": 7,
                "objective": {"name": "val_loss", "direction": "min"},
            },
        },
    )
    ckpt = tmp_path / "ckpt"
    assert run(spec, ckpt, tmp_path / "log") == EXIT_COMPLETED, (tmp_path / "log").read_text()
    res = results(ckpt)
    assert [t["status"] for t in res["trials"]] == ["COMPLETED"] * 3
    assert res["best"]["score"] == min(t["score"] for t in res["trials"])
    progress = read_progress(ckpt)
    assert progress is not None and progress.trials_completed == 3
