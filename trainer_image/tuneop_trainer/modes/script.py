"""Script mode (`python -m tuneop_trainer exec SCRIPT [ARGS...]`, or `run` with a
`spec.script`): a user's keras-tuner script, unchanged, run as `__main__` by the engine
(modes/runner.py) - its tuners, fits and callbacks resumed exactly after a kill. Here:
reading the script (a missing or non-.py file, a SyntaxError: exit 2 with file:line),
its fingerprint (the script's sha256 and arguments: a resume against another script
exits 2), and the one line an error ends with (the script's innermost frame).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import runpy
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

from tuneop_contract import ENV_SCRIPT_WORKDIR, EXIT_INVALID_SPEC
from tuneop_contract.spec import Checkpoint, SpecError

from .. import parallel
from ..checkpoint import fingerprint, volume_errors
from ..exits import fail, summary
from .runner import Program, outcome, run_program


def run_script(
    script: Path,
    args: list[str],
    checkpoint_dir: Path,
    checkpoint: Checkpoint,
    deterministic: bool = False,
    strategy_name: str = "Auto",
    field: str = "SCRIPT",
    python_path: tuple[str, ...] = (),
    continue_optimizer: bool = False,
) -> int:
    """Run `script` with `args` (its sys.argv[1:]); returns the exit code. The script's
    directory and `python_path` come first on sys.path, as for `python SCRIPT`.
    `continue_optimizer`: a promoted Hyperband trial continues its previous round's
    optimizer state (off: as under plain keras-tuner, which starts a fresh optimizer)."""
    try:
        source = _read_script(script, field)
    except SpecError as exc:
        return fail(EXIT_INVALID_SPEC, str(exc))
    program = Program(
        name=script.name,
        execute=lambda rt: _execute(script, source, args, python_path, rt.write),
        check=lambda root, write, wait: _check_record(
            root, script, source, args, continue_optimizer, write, wait
        ),
        keep_optimizer=continue_optimizer,
    )
    return run_program(program, checkpoint_dir, checkpoint, deterministic, strategy_name)


def _read_script(script: Path, field: str) -> str:
    if script.suffix != ".py":
        raise SpecError(field, f'"{script}" is not a Python file (*.py)')
    try:
        return script.read_text()
    except FileNotFoundError:
        raise SpecError(field, f'"{script}" does not exist') from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(field, f'cannot read "{script}": {exc}') from exc


def _check_record(
    root: Path,
    script: Path,
    source: str,
    args: list[str],
    continue_optimizer: bool,
    write: bool,
    wait: float = 0.0,
) -> None:
    """The search in `root` belongs to this script, these arguments and this way of
    continuing promoted trials (recorded only when it is not keras-tuner's)."""
    record: dict[str, object] = {
        "script": hashlib.sha256(source.encode()).hexdigest(),
        "arguments": list(args),
    }
    fields = {
        "script": str(script),
        "arguments": "ARGS",
        "continueOptimizerState": "spec.script.continueOptimizerState "
        "(exec --continue-optimizer-state)",
    }
    if continue_optimizer:
        record["continueOptimizerState"] = True
    fingerprint.check_or_record(root, record, fields, write, wait)


def _execute(
    script: Path, source: str, args: list[str], python_path: tuple[str, ...], write: bool
) -> tuple[int, str]:
    """(exit code, one-line message) of running the script as __main__."""
    try:
        compile(source, str(script), "exec")
    except SyntaxError as exc:
        return EXIT_INVALID_SPEC, f"{script.name}:{exc.lineno}: SyntaxError: {exc.msg}"
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args]
    sys.path[:0] = [str(script.parent), *python_path]

    def body() -> None:
        with _in_workdir(write):
            runpy.run_path(str(script), run_name="__main__")

    try:
        return outcome(body, script.name, lambda exc: _summary(script, exc))
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


@contextlib.contextmanager
def _in_workdir(write: bool) -> Iterator[None]:
    """Run in TUNEOP_SCRIPT_WORKDIR (the contract says which part of it is whose), so
    the files a script writes to relative paths are kept on the volume. `write`: this
    process writes the volume (a multi-worker group's chief)."""
    base = os.environ.get(ENV_SCRIPT_WORKDIR)
    if not base:
        yield
        return
    role = parallel.current()
    if not write:
        workdir = Path(tempfile.mkdtemp(prefix="tuneop-worker-"))
    elif role.parallel and not role.runs_post_search:
        workdir = Path(base) / str(role.tuner_id)
    else:
        workdir = Path(base)
    with volume_errors(workdir):
        workdir.mkdir(parents=True, exist_ok=True)
    saved = os.getcwd()
    os.chdir(workdir)
    try:
        yield
    finally:
        os.chdir(saved)


def _summary(script: Path, exc: BaseException) -> str:
    """`search.py:42: ValueError: ...`: the script's innermost frame, the error's first
    line and, when keras-tuner wrapped a trial's traceback into it, that traceback's
    last line (the user's error)."""
    where = script.name
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if Path(frame.filename).resolve() == script.resolve():
            where = f"{script.name}:{frame.lineno}"
            break
    return f"{where}: {summary(exc)}"[:1000]
