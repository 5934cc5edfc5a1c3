"""The scope guard matters: without it the report's CNN fails under MirroredStrategy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from trainer_helpers import env

HERE = Path(__file__).parent


@pytest.mark.slow
def test_plain_keras_tuner_building_outside_scope_raises_strategy_error() -> None:
    """Regression: plain keras-tuner, custom run_trial calling hypermodel.build outside
    strategy.scope() (the EMG report's CNN without its fix) and training inside it →
    the Keras 3 strategy error. tuneop's trainer runs the same CNN fine (see the resume
    tests, which use it under MirroredStrategy with Hyperband and kills)."""
    proc = subprocess.run(
        [sys.executable, str(HERE / "plain_keras_tuner_outside_scope.py")],
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Mixing different tf.distribute.Strategy objects" in out or (
        "colocate_vars_with must only be passed a variable created in this" in out
    ), out[-3000:]
