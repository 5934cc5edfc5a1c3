"""Elastic resume in the trainer: a search checkpointed on 2 replicas (MirroredStrategy over
2 logical CPUs) resumes on 1 and back on 2, and a 2-worker MultiWorkerMirrored group
resumes in one process and back, with the same global batch and data order.
Not bit-identical (the gradient reduction differs), so asserted as: the same batch at
every step (tests/trainer/scripts/elastic_search.py logs a fingerprint of each step's
global batch), the same trials and best trial, weights within the difference an
uninterrupted 1-replica run already has from the 2-replica one."""

from __future__ import annotations

import json
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from multiworker_helpers import kill_group_when, start_group, wait_all
from trainer_helpers import (
    SCRIPTS,
    results,
    signal_when,
    start_exec,
    trial_fit,
    write_spec,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_INVALID_SPEC

from tests.checkpoints import committed

SCRIPT = SCRIPTS / "elastic_search.py"
PROJECT = "search"

pytestmark = [pytest.mark.slow]


def _complete(ckpt: Path, devices: int) -> Path:
    log = ckpt.parent / "log"
    proc = start_exec(SCRIPT, ckpt, log, devices=devices)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    return ckpt


@pytest.fixture(scope="module")
def on_two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _complete(tmp_path_factory.mktemp("two") / "ckpt", devices=2)


@pytest.fixture(scope="module")
def on_one(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _complete(tmp_path_factory.mktemp("one") / "ckpt", devices=1)


def _steps(ckpt: Path) -> dict[tuple[str, int, int], set[tuple[float, float]]]:
    """Per (trial, epoch, step): every batch fingerprint logged (a replayed step logs
    again)."""
    seen: dict[tuple[str, int, int], set[tuple[float, float]]] = defaultdict(set)
    for line in (ckpt.parent / "steps.jsonl").read_text().splitlines():
        r = json.loads(line)
        seen[(r["trial"], r["epoch"], r["step"])].add((r["ids"], r["sq"]))
    return dict(seen)


def _trials(ckpt: Path) -> list[tuple[Any, ...]]:
    return [
        (t["trialId"], t["status"], json.dumps(t["hyperparameters"], sort_keys=True))
        for t in results(ckpt)["trials"]
    ]


def _weights(ckpt: Path, trial: str) -> list[np.ndarray]:
    latest = sorted((ckpt / trial_fit(trial, project=PROJECT)).glob("ckpt-*"))[-1]
    with np.load(latest / "state.npz") as state:
        return [state[k] for k in state.files if k.startswith("model/")]


def _distance(a: Path, b: Path) -> float:
    """Largest relative weight difference over the trials' final models."""
    worst = 0.0
    for trial, _, _ in _trials(a):
        for x, y in zip(_weights(a, trial), _weights(b, trial), strict=True):
            worst = max(worst, float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-12)))
    return worst


def _mid(trial: str, epoch: int, step: int) -> Any:
    return lambda p: p.trial_id == trial and (p.epoch, p.step) >= (epoch, step)


def _mid_committed(ckpt: Path, trial: str, epoch: int, step: int) -> Any:
    """`_mid`, once the trial's fit has a checkpoint committed (written by the replicas
    of the process killed there), which the next process resumes."""
    fit = ckpt / trial_fit(trial, project=PROJECT)
    return lambda p: _mid(trial, epoch, step)(p) and committed(fit)


def test_killed_on_two_resumed_on_one_then_two(on_two: Path, on_one: Path, tmp_path: Path) -> None:
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    first, second = (t[0] for t in _trials(on_two)[:2])
    assert (
        signal_when(
            start_exec(SCRIPT, ckpt, log, devices=2),
            ckpt,
            _mid_committed(ckpt, first, 1, 5),
            signal.SIGKILL,
        )
        == -signal.SIGKILL
    )
    assert (
        signal_when(
            start_exec(SCRIPT, ckpt, log, devices=1),
            ckpt,
            _mid_committed(ckpt, second, 0, 7),
            signal.SIGKILL,
        )
        == -signal.SIGKILL
    )
    proc = start_exec(SCRIPT, ckpt, log, devices=2)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    assert "resuming a checkpoint of 2 replicas on 1: the same global batch (8, 8 per" in text
    assert "resuming a checkpoint of 1 replicas on 2: the same global batch (8, 4 per" in text

    # The same batch at every step, in every process, replays included.
    reference, got = _steps(on_two), _steps(ckpt)
    assert set(got) == set(reference) and len(reference) == 3 * 3 * 12
    assert got == reference
    assert _steps(on_one) == reference  # the fingerprint does not depend on the replicas
    # The same trials, the same best trial, weights as close as 1 replica is to 2.
    assert _trials(ckpt) == _trials(on_two)
    assert results(ckpt)["best"]["trialId"] == results(on_two)["best"]["trialId"]
    baseline = _distance(on_one, on_two)
    assert _distance(ckpt, on_two) <= max(10 * baseline, 1e-6), (baseline, _distance(ckpt, on_two))


def test_a_global_batch_the_new_replicas_do_not_divide_is_refused(tmp_path: Path) -> None:
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    assert (
        signal_when(
            start_exec(SCRIPT, ckpt, log, devices=2),
            ckpt,
            lambda p: (  # the refusal below reads the running trial's checkpoint
                bool(p.trial_id)
                and p.step >= 5
                and committed(ckpt / trial_fit(p.trial_id, project=PROJECT))
            ),
            signal.SIGKILL,
        )
        == -signal.SIGKILL
    )
    proc = start_exec(SCRIPT, ckpt, log, devices=3)
    assert proc.wait(timeout=120) == EXIT_INVALID_SPEC
    last = log.read_text().strip().splitlines()[-1]
    assert "written by 2 replicas and this process has 3" in last
    assert "the global batch of 8 does not split evenly over 3" in last
    assert "(1, 2, 4, 8)" in last


def test_a_two_worker_group_resumes_in_one_pod_and_back(on_two: Path, tmp_path: Path) -> None:
    """2 workers of 1 device (MultiWorkerMirrored: the checkpoint holds the chief's
    share of each metric accumulator) killed mid-epoch, resumed as one process of 2
    devices, killed, resumed as the 2-worker group: the same batches and trials."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    ckpt.mkdir()
    spec = write_spec(tmp_path, {"checkpoint": {"intervalSteps": 3, "intervalSeconds": 0}})
    workers = [tmp_path / "w0", tmp_path / "w1"]
    first, second = (t[0] for t in _trials(on_two)[:2])
    kill_group_when(spec, ckpt, workers, _mid(first, 1, 5), SCRIPT)
    assert (
        signal_when(
            start_exec(SCRIPT, ckpt, log, devices=2), ckpt, _mid(second, 0, 7), signal.SIGKILL
        )
        == -signal.SIGKILL
    )
    codes = wait_all(start_group(spec, ckpt, workers, SCRIPT), timeout=300)
    assert codes == [EXIT_COMPLETED] * 2, workers[0].read_text()[-3000:]
    assert "resuming a checkpoint of 2 replicas on 2" not in log.read_text()
    assert _steps(ckpt) == _steps(on_two)
    assert _trials(ckpt) == _trials(on_two)
    assert results(ckpt)["best"]["trialId"] == results(on_two)["best"]["trialId"]
