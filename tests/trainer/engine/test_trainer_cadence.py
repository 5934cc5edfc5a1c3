"""`checkpoint.intervalSeconds: auto` in a real trainer: it measures its saves, chooses
the Young/Daly interval for the MTBF the operator passes (TUNEOP_MTBF_SECONDS), and
reports both in its progress record; a longer MTBF gives a longer interval. One spec-mode
and one script-mode search, each a few seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from trainer_helpers import SCRIPTS, env, tiny_spec, write_spec
from tuneop_contract import (
    ENV_MTBF_SECONDS,
    EXIT_COMPLETED,
    EXIT_INVALID_SPEC,
    Progress,
    expected_waste_per_hour,
    read_progress,
)
from tuneop_trainer.checkpoint import cadence

from tests.forkserver import launch

SHORT_MTBF = 30.0  # the interval's floor binds: sqrt(2 C M) < 5 s for any C < 0.4 s
LONG_MTBF = 1e7  # sqrt(2 C M) is minutes for a millisecond save


def trainer(command: list[str], mtbf: str, log: Path, timeout: float = 240) -> tuple[int, str]:
    """`python -m tuneop_trainer COMMAND` with the operator's MTBF: exit code, output."""
    e = env()
    e[ENV_MTBF_SECONDS] = mtbf
    code = launch(["-m", "tuneop_trainer", *command], e, log).wait(timeout=timeout)
    return code, log.read_text()


def reported(ckpt: Path, mtbf: float) -> Progress:
    progress = read_progress(ckpt)
    assert progress is not None
    cost, interval = progress.checkpoint_cost_seconds, progress.checkpoint_interval_seconds
    assert cost is not None and cost > 0 and interval is not None
    assert progress.mtbf_seconds == mtbf
    # the interval is the one chosen for the cost measured (rounded in the record)
    assert interval == pytest.approx(cadence.optimal_interval(cost, mtbf), rel=1e-3, abs=1e-2)
    waste = progress.expected_waste_seconds_per_hour
    assert waste == pytest.approx(expected_waste_per_hour(interval, cost, mtbf), rel=1e-3, abs=1e-3)
    return progress


def test_auto_interval_follows_the_mtbf_in_spec_and_script_mode(tmp_path: Path) -> None:
    manifest = tiny_spec(algorithm="RandomSearch", maxTrials=1, maxEpochs=2)
    manifest["spec"]["checkpoint"] = {"intervalSeconds": "auto"}
    spec = write_spec(tmp_path, manifest)
    short_ckpt = tmp_path / "short"
    command = ["run", "--spec", str(spec), "--dir", str(short_ckpt)]
    code, output = trainer(command, str(SHORT_MTBF), tmp_path / "short.log")
    assert code == EXIT_COMPLETED, output[-3000:]
    short = reported(short_ckpt, SHORT_MTBF)
    assert short.checkpoint_interval_seconds == cadence.MIN_INTERVAL_SECONDS

    settings = tmp_path / "exec-spec.yaml"
    settings.write_text(yaml.safe_dump({"checkpoint": {"intervalSeconds": "auto"}}))
    long_ckpt = tmp_path / "long"
    command = ["exec", "--dir", str(long_ckpt), "--spec", str(settings)]
    command += [str(SCRIPTS / "small_search.py")]
    code, output = trainer(command, str(LONG_MTBF), tmp_path / "long.log")
    assert code == EXIT_COMPLETED, output[-3000:]
    long = reported(long_ckpt, LONG_MTBF)
    assert long.checkpoint_interval_seconds is not None
    assert long.checkpoint_interval_seconds > 2 * cadence.MIN_INTERVAL_SECONDS


def test_a_bad_mtbf_is_a_one_line_exit_2(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, tiny_spec())
    command = ["run", "--spec", str(spec), "--dir", str(tmp_path / "c")]
    code, output = trainer(command, "soon", tmp_path / "log", 60)
    assert code == EXIT_INVALID_SPEC
    lines = [line for line in output.splitlines() if line.startswith("error: ")]
    assert lines == [f'error: {ENV_MTBF_SECONDS}: "soon" must be a number of seconds > 0']
