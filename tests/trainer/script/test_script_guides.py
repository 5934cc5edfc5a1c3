"""The official KerasTuner guides (keras-io guides/keras_tuner/, small faithful copies in
scripts/guides/) under `exec`: the same trials and statuses as without tuneop, and,
killed at several points (SIGKILL, SIGTERM, SIGKILL), the same result as the
uninterrupted exec run, bit for bit (every trial's score and what the script computes
after its searches).

The guides seed nothing, so their scores differ between two plain runs; under exec the
trainer seeds the run and every trial, so two exec runs agree exactly.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import SCRIPTS, env, signal_when, start_exec
from tuneop_contract import EXIT_COMPLETED, EXIT_PREEMPTED, TUNER_DIR, Progress
from tuneop_trainer.engine.projects import RECORD

from tests.forkserver import TrainerProcess, launch

GUIDES = SCRIPTS / "guides"


def _tuners(ckpt: Path) -> int:
    """Tuner constructions the search has reached (engine/projects.py's record)."""
    try:
        return len(json.loads((ckpt / TUNER_DIR / RECORD).read_text())["tuners"])
    except (OSError, ValueError):
        return 0


def _at(ckpt: Path, tuners: int, trial: str | None = None) -> Callable[[Progress], bool]:
    """Once the script has constructed `tuners` tuners (and runs `trial`, if given)."""
    return lambda p: _tuners(ckpt) >= tuners and (trial is None or p.trial_id == trial)


# (signal, tuners constructed, trial running, seconds after that): kill points spread
# over each guide's tuners, in trials, fits and the code between them.
KILLS: dict[str, list[tuple[int, int, str | None, float]]] = {
    "getting_started": [
        (signal.SIGKILL, 2, None, 1.0),
        (signal.SIGTERM, 5, None, 0.5),
        (signal.SIGKILL, 8, None, 0.5),
    ],
    "tailor_the_search_space": [
        (signal.SIGKILL, 2, None, 1.0),
        (signal.SIGTERM, 3, None, 0.5),
        (signal.SIGKILL, 4, None, 0.3),
    ],
    "failed_trials": [
        (signal.SIGKILL, 1, "0001", 0.2),
        (signal.SIGTERM, 2, "0003", 0.0),  # in a trial that fails, between retries
        (signal.SIGKILL, 3, "0001", 0.0),
    ],
    "visualize_tuning": [
        (signal.SIGKILL, 1, "1", 0.3),
        (signal.SIGTERM, 1, "2", 0.0),
    ],
    "custom_tuner": [  # its own training loop: a kill restarts the trial
        (signal.SIGKILL, 1, "1", 0.5),
    ],
}


# Logical devices under exec: 2 (MirroredStrategy, as on a multi-GPU pod) for the guides
# whose code runs in the strategy's replicas in its own ways (the getting-started guide's
# own fit and run_trial overrides, the custom tuner's training loop, the TensorBoard
# callback); 1 (a one-GPU pod) for those whose subject is keras-tuner's bookkeeping
# (several tuners and overwrite=True, compile overrides, failed trials and retries,
# reload), which no replica touches: there a two-replica run costs twice the tracing and
# checks nothing more.
DEVICES = {"tailor_the_search_space": 1, "failed_trials": 1, "kt_promises": 1}


def _result(log: Path) -> dict[str, Any]:
    lines = [line for line in log.read_text().splitlines() if line.startswith("GUIDE_RESULT ")]
    assert lines, log.read_text()[-3000:]
    result: dict[str, Any] = json.loads(lines[-1].split(" ", 1)[1])
    return result


def _outcome(result: dict[str, Any]) -> dict[str, Any]:
    """Each tuner's trials as (id, status), and the flags and names the script reports;
    not the scores (an unseeded plain run draws other ones)."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, list) and value and isinstance(value[0], dict) and "id" in value[0]:
            out[key] = [(t["id"], t["status"]) for t in value]
        elif isinstance(value, bool | str):
            out[key] = value
    return out


def _plain(script: Path, cwd: Path, log: Path) -> TrainerProcess:
    """The script as its user runs it: plain Python, no tuneop."""
    cwd.mkdir()
    plain_env = {k: v for k, v in env().items() if not k.startswith("TUNEOP_")}
    return launch([str(script)], plain_env, log, cwd=cwd)


def _devices(script: Path) -> int:
    return DEVICES.get(script.stem.removeprefix("guide_"), 2)


def _start(script: Path, ckpt: Path, log: Path) -> TrainerProcess:
    return start_exec(script, ckpt, log, devices=_devices(script))


def _run_exec(script: Path, ckpt: Path, log: Path) -> None:
    proc = _start(script, ckpt, log)
    assert proc.wait(timeout=600) == EXIT_COMPLETED, log.read_text()[-3000:]


def _plain_and_reference(script: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The script run plainly (in tmp/plain) and under exec uninterrupted (tmp/ref),
    side by side; their logs. tmp/killed is made for the killed runs."""
    (tmp_path / "ref").mkdir()
    (tmp_path / "killed").mkdir()
    plain_log, ref_log = tmp_path / "plain.log", tmp_path / "ref.log"
    plain = _plain(script, tmp_path / "plain", plain_log)
    try:
        _run_exec(script, tmp_path / "ref" / "ckpt", ref_log)
        assert plain.wait(timeout=600) == 0, plain_log.read_text()[-3000:]
    finally:
        if plain.poll() is None:
            plain.kill()
    return plain_log, ref_log


@pytest.mark.parametrize("guide", list(KILLS))
def test_guide_runs_as_without_tuneop_and_resumes_exactly(guide: str, tmp_path: Path) -> None:
    script = GUIDES / f"guide_{guide}.py"
    plain_log, ref_log = _plain_and_reference(script, tmp_path)
    log = tmp_path / "run.log"
    reference = _result(ref_log)
    assert _outcome(reference) == _outcome(_result(plain_log))

    ckpt = tmp_path / "killed" / "ckpt"
    for sig, tuners, trial, delay in KILLS[guide]:
        code = signal_when(_start(script, ckpt, log), ckpt, _at(ckpt, tuners, trial), sig, delay)
        assert code == (-signal.SIGKILL if sig == signal.SIGKILL else EXIT_PREEMPTED), (
            log.read_text()[-3000:]
        )
    _run_exec(script, ckpt, log)
    assert "the script raised" not in log.read_text()  # keras-tuner prints failed trials' own
    assert _result(log) == reference
    if guide in ("getting_started", "tailor_the_search_space", "failed_trials"):
        # several tuners, overwrite=True: each reached once, none wiped by a resume
        assert _tuners(ckpt) == _tuners(tmp_path / "ref" / "ckpt") > 1
    # the files the script writes in its working directory are the uninterrupted run's
    assert sorted(os.listdir(tmp_path / "killed")) == sorted(os.listdir(tmp_path / "ref"))


def _promises(log: Path) -> dict[str, Any]:
    lines = [line for line in log.read_text().splitlines() if line.startswith("PROMISES ")]
    assert lines, log.read_text()[-3000:]
    result: dict[str, Any] = json.loads(lines[-1].split(" ", 1)[1])
    return result


def test_keras_tuner_promises_hold_under_exec_and_after_a_kill(tmp_path: Path) -> None:
    """Reload, overwrite=True, run_trial's return values, failed and invalid trials with
    retries, get_best_models and results_summary: as plain keras-tuner has them; killed
    in the overwriting tuner's search, the tuner before it is not run again and the
    overwriting one starts afresh once, then resumes."""
    script = SCRIPTS / "kt_promises.py"
    plain_log, ref_log = _plain_and_reference(script, tmp_path)
    log = tmp_path / "run.log"
    expected = _promises(plain_log)
    assert expected["reloaded_after_search"] == expected["first"]
    assert expected["overwritten_before_search"] == []
    assert _promises(ref_log) == expected
    runs = (tmp_path / "plain" / "runs.log").read_text()
    assert (tmp_path / "ref" / "runs.log").read_text() == runs

    ckpt = tmp_path / "killed" / "ckpt"
    code = signal_when(_start(script, ckpt, log), ckpt, _at(ckpt, 3, "1"), signal.SIGKILL)
    assert code == -signal.SIGKILL
    _run_exec(script, ckpt, log)
    assert _promises(log) == expected
    started = (tmp_path / "killed" / "runs.log").read_text().splitlines()
    assert started[:3] == runs.splitlines()[:3]  # the first tuner's trials, then afresh
    rest = [int(line.split()[1]) for line in started[2:]]
    assert rest == sorted(rest) and set(rest) == {0, 1, 2}  # resumed, never restarted
