"""Batches that do not split evenly across replicas (MirroredStrategy, 2 logical CPUs).

Keras 3 averages the first batch of every fit/evaluate across replicas to get shapes for
its symbolic build, which fails when that batch splits unevenly (tuneop_trainer/patches/uneven.py).
Here the validation set has a partial batch that splits 7/6 - as the only batch, and as the
last of two. The training set is whole batches: a partial training batch split unevenly
trains with each replica's mean loss weighted equally (Keras's rule, docs/design/trainer.md
"Uneven batches"), which no 1-device run matches. The search must complete and give
the same numbers as a 1-device run: the model has no dropout (per-replica dropout masks
would differ), so the only difference left is float summation order across replicas.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_helpers import fit_final, results, spec_fit, spec_trial, start, write_spec
from tuneop_contract import EXIT_COMPLETED

# User code on the "volume" (spec.pythonPath): a tiny MLP without dropout.
MODEL = """
import keras


def build(hp):
    model = keras.Sequential(
        [
            keras.Input(shape=(16, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(hp.Int("units", 4, 12, step=4), activation="relu"),
            keras.layers.Dense(4, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(hp.Choice("learning_rate", [1e-2, 3e-3])),
        loss="categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model
"""


def _search(tmp: Path, name: str, samples: int, split: float, devices: int) -> Path:
    manifest = {
        "hypermodel": "uneven_model:build",
        "pythonPath": [str(tmp)],
        "data": {"synthetic": {"samples": samples, "seed": 1}, "validationSplit": split},
        "tuner": {
            "algorithm": "RandomSearch",
            "maxTrials": 2,
            "maxEpochs": 2,
            "batchSize": 16,
            "seed": 7,
            "deterministic": True,
            "objective": {"name": "val_loss", "direction": "min"},
        },
    }
    spec = write_spec(tmp, manifest, f"{name}.yaml")
    ckpt, log = tmp / name, tmp / f"{name}.log"
    assert start(spec, ckpt, log, devices=devices).wait(timeout=240) == EXIT_COMPLETED, (
        log.read_text()
    )
    return ckpt


def _histories(ckpt: Path) -> dict[str, dict[str, list[float]]]:
    return {
        p.name: fit_final(ckpt, spec_fit(p.name))["history"]
        for p in sorted((ckpt / spec_trial("")).iterdir())
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("samples", "split", "n_val"),
    [
        # train 48 = 3x16; validation 13: one batch, split 7/6 (crashed before the fix)
        (61, 0.213, 13),
        # train 64 = 4x16; validation 29 = 16 + 13: the partial batch comes last, so
        # keras' first-batch build never saw it; its 7/6 split must still count exactly
        (93, 0.312, 29),
    ],
)
def test_uneven_batches_match_one_device(
    tmp_path: Path, samples: int, split: float, n_val: int
) -> None:
    assert round(samples * split) == n_val and n_val % 16 % 2 == 1
    assert (samples - n_val) % 16 == 0
    (tmp_path / "uneven_model.py").write_text(MODEL)
    two = _search(tmp_path, "two", samples, split, devices=2)
    one = _search(tmp_path, "one", samples, split, devices=1)

    res2, res1 = results(two), results(one)
    assert [t["status"] for t in res2["trials"]] == ["COMPLETED"] * 2
    assert [(t["trialId"], t["hyperparameters"]) for t in res2["trials"]] == [
        (t["trialId"], t["hyperparameters"]) for t in res1["trials"]
    ]
    assert [t["score"] for t in res2["trials"]] == pytest.approx(
        [t["score"] for t in res1["trials"]], rel=1e-5
    )
    assert res2["best"]["trialId"] == res1["best"]["trialId"]
    # Every epoch's metrics, not just the objective: the validation pass covered all
    # n_val samples on both replicas (accuracy is a count over n_val, so exactly equal).
    h2, h1 = _histories(two), _histories(one)
    assert sorted(h2) == sorted(h1) and len(h2) == 2
    for tid in h1:
        assert h2[tid]["val_accuracy"] == h1[tid]["val_accuracy"]
        for key in ("loss", "val_loss"):
            assert h2[tid][key] == pytest.approx(h1[tid][key], rel=1e-5), (tid, key)
