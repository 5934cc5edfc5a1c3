"""The trainer's command line:
  `python -m tuneop_trainer run --spec FILE [--dir DIR]`
  `python -m tuneop_trainer exec [--dir DIR] [--spec FILE] [--deterministic]
  [--continue-optimizer-state] SCRIPT [ARGS...]`

FILE is a TuningJob manifest or just its spec; DIR is the checkpoint directory (the
PersistentVolume mount in a pod). `run` runs the spec's search (modes/tuningjob.py) or, with a
`spec.script`, that script as `exec` does (modes/script.py): both under one engine.
Exit codes come from tuneop_contract: 0 completed, 1 failed, 2 invalid spec (one-line
message naming the field, also written to the termination-message path), 75 preempted
(SIGTERM; a checkpoint was written: resume me).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
from pathlib import Path

from tuneop_contract import (
    DEFAULT_CHECKPOINT_DIR,
    DEFAULT_SPEC_FILE,
    ENV_CHECKPOINT_DIR,
    ENV_SPEC_FILE,
    EXIT_FAILED,
    EXIT_INVALID_SPEC,
    EXIT_PREEMPTED,
)
from tuneop_contract.spec import SpecError

from . import preemption, strategy
from .checkpoint import VolumeError, ownership, volume_errors, volume_format
from .checkpoint.cadence import mtbf_from_env
from .exits import fail
from .modes import script_packages
from .parallel import roles
from .spec import ScriptSpec, TrainerSpec, load_spec_file

log = logging.getLogger("tuneop_trainer")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tuneop_trainer")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run (or resume) the search described by a TuningJob")
    run.add_argument("--spec", default=os.environ.get(ENV_SPEC_FILE, DEFAULT_SPEC_FILE))
    run.add_argument("--dir", default=os.environ.get(ENV_CHECKPOINT_DIR, DEFAULT_CHECKPOINT_DIR))
    exe = sub.add_parser(
        "exec", help="run (or resume) a keras-tuner script, unchanged, preemption-safe"
    )
    exe.add_argument("--dir", default=os.environ.get(ENV_CHECKPOINT_DIR, DEFAULT_CHECKPOINT_DIR))
    exe.add_argument(
        "--spec",
        default=None,
        help="a TuningJob (or its spec) for the checkpoint settings (spec.checkpoint)",
    )
    exe.add_argument(
        "--deterministic", action="store_true", help="TF op determinism (bit-identical resumes)"
    )
    exe.add_argument(
        "--continue-optimizer-state",
        action="store_true",
        help="Hyperband: a promoted trial continues its previous round's optimizer state "
        "(plain keras-tuner restarts the optimizer)",
    )
    exe.add_argument("script", help="the keras-tuner script (*.py)")
    exe.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Before anything slow: a SIGTERM during start-up must still end in a clean exit 75.
    preemption.install()
    if args.command == "exec":
        return _exec(args)
    try:
        spec = load_spec_file(args.spec)
        mtbf_from_env()  # the operator's TUNEOP_MTBF_SECONDS, checked before anything slow
        _check_installed(spec)
        _check_volume(spec, Path(args.dir))
    except SpecError as exc:
        return fail(EXIT_INVALID_SPEC, str(exc))
    except VolumeError as exc:  # retryable: nothing was written
        return fail(EXIT_PREEMPTED, exc.message)
    except OSError as exc:
        return fail(EXIT_FAILED, f"cannot use the checkpoint volume {args.dir}: {exc}")
    if spec.script is not None:
        return _run_script(spec, spec.script, Path(args.dir))
    from .modes import tuningjob

    return tuningjob.run(spec.job, Path(args.dir))


def _run_script(spec: TrainerSpec, script: ScriptSpec, claim: Path) -> int:
    """`run` of a spec.script: its own packages installed (on first use), then the
    script under the engine."""
    from .modes.script import run_script

    try:
        python_path = (*spec.job.python_path, *_script_packages(script, claim))
    except SpecError as exc:
        return fail(EXIT_INVALID_SPEC, str(exc))
    except script_packages.PackagesError as exc:
        return fail(EXIT_FAILED, str(exc))
    return run_script(
        Path(script.path),
        list(script.args),
        claim,
        spec.job.checkpoint,
        deterministic=script.deterministic,
        continue_optimizer=script.continue_optimizer,
        strategy_name=spec.job.distribution.strategy,
        field=script.field,
        python_path=python_path,
    )


def _script_packages(script: ScriptSpec, claim: Path) -> tuple[str, ...]:
    """The directory of the script's own packages, installed on first use; () without
    spec.script.requirements."""
    if not script.requirements:
        return ()
    target = script_packages.install(Path(script.requirements), claim, "spec.script.requirements")
    return (str(target),)


def _exec(args: argparse.Namespace) -> int:
    from .modes.script import run_script

    try:
        spec = load_spec_file(args.spec) if args.spec else TrainerSpec()
        mtbf_from_env()
        _check_volume(spec, Path(args.dir), exec_mode=True)
    except SpecError as exc:
        return fail(EXIT_INVALID_SPEC, str(exc))
    except VolumeError as exc:  # retryable: nothing was written
        return fail(EXIT_PREEMPTED, exc.message)
    except OSError as exc:
        return fail(EXIT_FAILED, f"cannot use the checkpoint volume {args.dir}: {exc}")
    return run_script(
        Path(args.script),
        list(args.args),
        Path(args.dir),
        spec.job.checkpoint,
        deterministic=args.deterministic,
        continue_optimizer=args.continue_optimizer_state,
        strategy_name=spec.job.distribution.strategy,
    )


def _check_installed(spec: TrainerSpec) -> None:
    """keras-tuner's BayesianOptimization needs scipy and scikit-learn (its `bayesian`
    extra); say so up front instead of failing every trial."""
    if spec.job.tuner.algorithm != "BayesianOptimization":
        return
    missing = [m for m in ("scipy", "sklearn") if not importlib.util.find_spec(m)]
    if missing:
        raise SpecError(
            "spec.tuner.algorithm",
            f'"BayesianOptimization" needs {" and ".join(missing)}, which this trainer image '
            "lacks; use Hyperband, RandomSearch or GridSearch, or an image with "
            "keras-tuner[bayesian]",
        )


def _check_volume(spec: TrainerSpec, root: Path, exec_mode: bool = False) -> None:
    """The volume is in this trainer's format (checkpoint/volume_format.py) and its search is this
    job's, or adopted on request (checkpoint/ownership.py). The writer is the process that records
    the search: the chief, or a parallel search's oracle. A volume that fails (full, an
    I/O error) raises VolumeError."""
    write = strategy.is_chief() and not roles.current().is_group
    script_mode = spec.script is not None or exec_mode
    reads = volume_format.SCRIPT_READS if script_mode else (volume_format.FORMAT,)
    with volume_errors(root):
        if write:
            root.mkdir(parents=True, exist_ok=True)
        volume_format.check_volume(root, write, reads)
        ownership.check(root, spec, write)
