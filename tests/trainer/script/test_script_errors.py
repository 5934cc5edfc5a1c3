"""Script mode's errors: one line naming the file and line (or what changed), exit 2
for what tuneop cannot run or resume, exit 1 for a script that raises; never a silent
mix of two searches."""

from __future__ import annotations

import signal
from pathlib import Path

import numpy as np
import pytest
from trainer_helpers import SCRIPTS, env, kill_exec_when, start_exec
from tuneop_contract import EXIT_COMPLETED, EXIT_FAILED, EXIT_INVALID_SPEC, EXIT_PREEMPTED

from tests.forkserver import launch


def _exec(tmp: Path, script: Path, *args: str, devices: int = 1) -> tuple[int, str]:
    """`exec` on `script` to its end: (exit code, its one `error: ` line or "")."""
    log = tmp / f"exec-{len(list(tmp.glob('exec-*.log')))}.log"  # one per run
    command = ["-m", "tuneop_trainer", "exec", "--dir", str(tmp / "ckpt"), str(script), *args]
    code = launch(command, env(devices), log, cwd=tmp).wait(timeout=300)
    output = log.read_text()
    lines = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 or code == 0, output[-3000:]
    return code, lines[0] if lines else ""


def test_missing_script(tmp_path: Path) -> None:
    code, line = _exec(tmp_path, tmp_path / "nope.py")
    assert code == EXIT_INVALID_SPEC
    assert line == f'error: SCRIPT: "{tmp_path / "nope.py"}" does not exist'


def test_not_a_python_file(tmp_path: Path) -> None:
    (tmp_path / "search.sh").write_text("echo hi\n")
    code, line = _exec(tmp_path, tmp_path / "search.sh")
    assert code == EXIT_INVALID_SPEC and "is not a Python file" in line


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "syntax_error.py").write_text("import keras\n\ndef broken(:\n    pass\n")
    code, line = _exec(tmp_path, tmp_path / "syntax_error.py")
    assert code == EXIT_INVALID_SPEC
    assert line.startswith("error: syntax_error.py:3: SyntaxError")


def test_a_raising_script_is_exit_1_with_its_line(tmp_path: Path) -> None:
    code, line = _exec(tmp_path, SCRIPTS / "raises.py")
    assert code == EXIT_FAILED
    assert line == "error: raises.py:4: ZeroDivisionError: division by zero"


def test_model_built_outside_the_scope_is_exit_2(tmp_path: Path) -> None:
    code, line = _exec(tmp_path, SCRIPTS / "outside_scope.py", devices=2)
    assert code == EXIT_INVALID_SPEC, line
    assert "outside_scope.py: build(hp) returned a model or optimizer created outside" in line


def test_a_changed_script_is_refused_on_resume(tmp_path: Path) -> None:
    script = tmp_path / "search.py"
    script.write_text("print('first')\n")
    assert _exec(tmp_path, script)[0] == EXIT_COMPLETED
    script.write_text("print('second')\n")
    code, line = _exec(tmp_path, script)
    assert code == EXIT_INVALID_SPEC
    assert f"error: {script}: script changed since the search in" in line
    code, line = _exec(tmp_path, SCRIPTS / "raises.py", "--other")
    assert code == EXIT_INVALID_SPEC


@pytest.mark.slow
def test_changed_data_is_detected_at_the_resumed_fit(tmp_path: Path) -> None:
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    rng = np.random.default_rng(0)
    np.save(tmp_path / "data.npy", rng.normal(size=(40, 4)).astype("float32"))
    code = kill_exec_when(
        SCRIPTS / "file_data.py",
        ckpt,
        log,
        lambda p: p.trial_id == "0" and p.epoch >= 1,
        sig=signal.SIGTERM,
    )
    assert code == EXIT_PREEMPTED, log.read_text()[-3000:]
    np.save(tmp_path / "data.npy", rng.normal(size=(40, 4)).astype("float32"))
    proc = start_exec(SCRIPTS / "file_data.py", ckpt, log)
    assert proc.wait(timeout=300) == EXIT_INVALID_SPEC
    line = [x for x in log.read_text().splitlines() if x.startswith("error: ")][-1]
    assert line.startswith(
        "error: file_data.py: untitled_project trial 0 fit 0: its training data changed"
    )
