"""A completed trainer leaves the final summary in its termination message (both
modes), and it agrees with results.json: the operator's final status does not depend
on the trainer's last status patch reaching the API server."""

from __future__ import annotations

import json
from pathlib import Path

from trainer_helpers import SCRIPTS, env, tiny_spec, write_spec
from tuneop_contract import (
    EXIT_COMPLETED,
    RESULTS_FILE,
    TOP_TRIALS,
    parse_final_summary,
    read_progress,
)

from tests.forkserver import launch

# The trainer's own entry point with the termination-message path moved into the test's
# directory (in a pod the kubelet creates /dev/termination-log).
RUN = (
    "import sys; from tuneop_trainer import cli, exits; "
    "exits.TERMINATION_MESSAGE_PATH = sys.argv[1]; sys.exit(cli.main(sys.argv[2:]))"
)


def _run(tmp: Path, *args: str) -> Path:
    log = tmp / "termination-log"
    log.touch()
    output = tmp / "output.log"
    code = launch(["-c", RUN, str(log), *args], env(), output, cwd=tmp).wait(timeout=600)
    assert code == EXIT_COMPLETED, output.read_text()[-3000:]
    return log


def _check(log: Path, ckpt: Path) -> None:
    summary = parse_final_summary(log.read_text())
    assert summary is not None, log.read_text()
    results = json.loads((ckpt / RESULTS_FILE).read_text())
    done = [t for t in results["trials"] if t["status"] == "COMPLETED"]
    assert summary.trials_completed == len(done) > 0
    assert summary.trials_total is not None and summary.trials_total >= len(done)
    assert summary.best_trial_id == results["best"]["trialId"]
    assert summary.best_score == results["best"]["score"]
    assert summary.best_hyperparameters == results["best"]["hyperparameters"]
    # The top trials, best first, agree with keras-tuner's own best trial and with
    # results.json; the last progress record on the volume carries the same list.
    top = summary.top_trials
    assert top and len(top) == min(TOP_TRIALS, len(done))
    assert top[0]["trialId"] == results["best"]["trialId"]
    assert top[0]["hyperparameters"] == results["best"]["hyperparameters"]
    by_id = {t["trialId"]: t for t in done}
    assert all(by_id[t["trialId"]]["score"] == t["score"] for t in top)
    scores = [t["score"] for t in top]
    best_first = sorted(scores, reverse=results["objective"]["direction"] == "max")
    assert scores == best_first
    last = read_progress(ckpt)
    assert last is not None and last.top_trials == top


def test_spec_mode_writes_the_final_summary(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, tiny_spec(maxEpochs=2, factor=2))
    log = _run(tmp_path, "run", "--spec", str(spec), "--dir", str(tmp_path / "ckpt"))
    _check(log, tmp_path / "ckpt")


def test_script_mode_writes_the_final_summary(tmp_path: Path) -> None:
    script = SCRIPTS / "seed_search.py"
    log = _run(tmp_path, "exec", "--dir", str(tmp_path / "ckpt"), str(script))
    _check(log, tmp_path / "ckpt")
