"""Mixed precision, set by the user's script or by `spec.tuner.dtypePolicy`, survives
keras-tuner's clear_session (every trial really computes in 16 bits) and resumes
exactly, loss-scale state included."""

from __future__ import annotations

import signal
from pathlib import Path

import numpy as np
import pytest
from trainer_helpers import (
    SCRIPTS,
    comparable,
    env,
    fit_final,
    fit_weights,
    kill_exec_when,
    kill_when,
    results,
    run,
    start_exec,
    tiny_spec,
    trial_fit,
    write_spec,
)
from tuneop_contract import EXIT_COMPLETED

from tests.checkpoints import committed
from tests.forkserver import launch

SCRIPT = SCRIPTS / "mixed_search.py"

pytestmark = [pytest.mark.slow, pytest.mark.devices(2)]


@pytest.mark.parametrize(
    "policy",
    [
        # bfloat16 has no loss scale: one replica; float16's dynamic loss scale is
        # aggregated across replicas: two
        pytest.param("mixed_bfloat16", marks=pytest.mark.devices(1)),
        "mixed_float16",
    ],
)
def test_mixed_precision_resumes_exactly(policy: str, tmp_path: Path) -> None:
    ref, log = tmp_path / "ref", tmp_path / "ref.log"
    proc = start_exec(SCRIPT, ref, log, policy)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    for trial in ("0", "1"):
        history = fit_final(ref, trial_fit(trial))["history"]
        assert history["compute_16bit"] == [1.0] * 4, "the policy survived clear_session"

    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    code = kill_exec_when(
        SCRIPT,
        ckpt,
        log,
        lambda p: (
            p.trial_id == "1" and p.epoch >= 1 and p.step >= 3 and committed(ckpt / trial_fit("1"))
        ),
        policy,
    )
    assert code == -signal.SIGKILL
    proc = start_exec(SCRIPT, ckpt, log, policy)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert "trial 1 fit 0: restored" in log.read_text()
    assert comparable(results(ckpt)) == comparable(results(ref))
    for trial in ("0", "1"):
        fit = trial_fit(trial)
        assert fit_weights(ckpt, fit) == fit_weights(ref, fit)
        assert fit_final(ckpt, fit)["history"] == fit_final(ref, fit)["history"]
    latest = sorted((ckpt / trial_fit("1")).glob("ckpt-*"))[-1]
    with np.load(latest / "state.npz") as npz:
        scale = [k for k in npz.files if k.endswith("dynamic_scale")]
    assert bool(scale) == (policy == "mixed_float16"), "the loss scale is checkpointed"


@pytest.mark.devices(1)
def test_spec_mode_dtype_policy_resumes_exactly(tmp_path: Path) -> None:
    manifest = tiny_spec(algorithm="RandomSearch", maxTrials=2, dtypePolicy="mixed_bfloat16")
    spec = write_spec(tmp_path, manifest)
    ref, log = tmp_path / "ref", tmp_path / "ref.log"
    assert run(spec, ref, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    second = results(ref)["trials"][1]["trialId"]
    code = kill_when(spec, ckpt, log, lambda p: p.trial_id == second and p.step >= 3)
    assert code == -signal.SIGKILL
    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert comparable(results(ckpt)) == comparable(results(ref))
    assert results(ckpt)["best"]["weightsSha256"] == results(ref)["best"]["weightsSha256"]
    probe = (
        "import keras, sys; m = keras.saving.load_model(sys.argv[1]);"
        "print(m.layers[-1].dtype_policy.name)"
    )
    out = tmp_path / "probe.log"
    code = launch(["-c", probe, str(ckpt / "best_model.keras")], env(), out).wait(timeout=120)
    assert code == 0, out.read_text()[-2000:]
    assert out.read_text().strip().splitlines()[-1] == "mixed_bfloat16", out.read_text()[-2000:]
