"""A trial whose trainer was SIGKILLed (as the kernel's OOM killer does) and that the
operator names in TUNEOP_FAILED_TRIALS is recorded FAILED on restart, not retried; the
search goes on with the other trials (spec mode and script mode)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from trainer_helpers import (
    SCRIPTS,
    kill_exec_when,
    kill_when,
    results,
    start,
    start_exec,
    tiny_spec,
    write_spec,
)
from tuneop_contract import ENV_FAILED_TRIALS, EXIT_COMPLETED, format_failed_trials

pytestmark = pytest.mark.slow


def _oracle_trial(ckpt: Path, project: str, trial_id: str) -> dict:
    path = ckpt / "tuner" / project / f"trial_{trial_id}" / "trial.json"
    return json.loads(path.read_text())


def _check(ckpt: Path, project: str, killed: str, log: Path) -> None:
    res = results(ckpt)
    by_id = {t["trialId"]: t for t in res["trials"]}
    assert len(by_id) == 3, log.read_text()[-3000:]
    assert by_id[killed]["status"] == "FAILED"
    assert by_id[killed]["score"] is None
    others = [t for tid, t in by_id.items() if tid != killed]
    assert [t["status"] for t in others] == ["COMPLETED", "COMPLETED"]
    assert res["best"]["trialId"] != killed
    assert res["best"]["trialId"] in {t["trialId"] for t in others}
    stored = _oracle_trial(ckpt, project, killed)
    assert stored["status"] == "FAILED"
    assert "out of memory in a previous attempt" in stored["message"]
    oracle = json.loads((ckpt / "tuner" / project / "oracle.json").read_text())
    assert killed not in oracle["retry_queue"] and not oracle["ongoing_trials"]
    assert oracle["end_order"].count(killed) == 1


def test_spec_mode_a_trial_killed_for_memory_is_failed_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_spec(tmp_path, tiny_spec(algorithm="RandomSearch", maxTrials=3, maxEpochs=2))
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    killed = kill_when(spec, ckpt, log, lambda p: p.trial_id == "1" and p.step >= 2)
    assert killed == -signal.SIGKILL
    monkeypatch.setenv(ENV_FAILED_TRIALS, format_failed_trials({"1": "OOMKilled", "9": "x"}))
    code = start(spec, ckpt, log).wait(timeout=240)
    assert code == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    assert "trial 1 recorded FAILED" in text
    assert "trial 9 is not a trial of this search; ignored" in text
    _check(ckpt, "search", "1", log)
    # idempotent: a second start with the same variable ends no trial again
    before = results(ckpt)
    assert start(spec, ckpt, log).wait(timeout=240) == EXIT_COMPLETED
    assert results(ckpt) == before
    assert log.read_text().count("trial 1 recorded FAILED") == 1


def test_script_mode_a_trial_killed_for_memory_is_failed_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = SCRIPTS / "small_search.py"
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    killed = kill_exec_when(script, ckpt, log, lambda p: p.trial_id == "1" and p.step >= 2)
    assert killed == -signal.SIGKILL
    monkeypatch.setenv(ENV_FAILED_TRIALS, format_failed_trials({"1": "OOMKilled"}))
    code = start_exec(script, ckpt, log).wait(timeout=240)
    assert code == EXIT_COMPLETED, log.read_text()[-3000:]
    assert "trial 1 recorded FAILED" in log.read_text()
    _check(ckpt, "untitled_project", "1", log)
