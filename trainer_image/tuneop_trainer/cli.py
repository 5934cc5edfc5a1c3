"""The trainer's command line:
  `python -m tuneop_trainer run --spec FILE [--dir DIR]`
  `python -m tuneop_trainer exec [--dir DIR] [--spec FILE] [--deterministic] SCRIPT [ARGS...]`

FILE is a TuningJob manifest or just its spec; DIR is the checkpoint directory (the
PersistentVolume mount in a pod). `run` with a `spec.script` runs that script as `exec`
does (script/runner.py). Exit codes come from tuneop_contract: 0 completed,
1 failed, 2 invalid spec (one-line message naming the field, also written to the
termination-message path), 75 preempted (SIGTERM; a checkpoint was written: resume me).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import logging
import os
import sys
from pathlib import Path
from typing import Any

from tuneop_contract import (
    DEFAULT_CHECKPOINT_DIR,
    DEFAULT_SPEC_FILE,
    ENV_CHECKPOINT_DIR,
    ENV_SPEC_FILE,
    EXIT_COMPLETED,
    EXIT_FAILED,
    EXIT_INVALID_SPEC,
    EXIT_PREEMPTED,
    PHASE_COMPLETED,
    PHASE_FAILED,
    PHASE_PREEMPTED,
    PHASE_RUNNING,
)

from . import exits, preemption
from .cadence import mtbf_from_env
from .checkpoint import VolumeError, volume_errors
from .exits import fail, summary
from .spec import SpecError, TrainerSpec, load_spec_file
from .volume_format import FormatMismatch

log = logging.getLogger("tuneop_trainer")


def main(argv: list[str] | None = None) -> int:
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
    exe.add_argument("script", help="the keras-tuner script (*.py)")
    exe.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    args = parser.parse_args(argv)
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
        from .script.runner import run_script

        return run_script(
            Path(spec.script.path),
            list(spec.script.args),
            Path(args.dir),
            spec.checkpoint,
            deterministic=spec.script.deterministic,
            strategy_name=spec.strategy,
            field=spec.script.field,
            python_path=spec.python_path,
        )
    return run_search(spec, Path(args.dir))


def _exec(args: argparse.Namespace) -> int:
    from .script.runner import run_script

    try:
        spec = load_spec_file(args.spec) if args.spec else TrainerSpec()
        mtbf_from_env()
        _check_volume(spec, Path(args.dir))
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
        spec.checkpoint,
        deterministic=args.deterministic,
        strategy_name=spec.strategy,
    )


def _check_installed(spec: TrainerSpec) -> None:
    """keras-tuner's BayesianOptimization needs scipy and scikit-learn (its `bayesian`
    extra); say so up front instead of failing every trial."""
    if spec.tuner.algorithm != "BayesianOptimization":
        return
    missing = [m for m in ("scipy", "sklearn") if not importlib.util.find_spec(m)]
    if missing:
        raise SpecError(
            "spec.tuner.algorithm",
            f'"BayesianOptimization" needs {" and ".join(missing)}, which this trainer image '
            "lacks; use Hyperband, RandomSearch or GridSearch, or an image with "
            "keras-tuner[bayesian]",
        )


def _check_volume(spec: TrainerSpec, root: Path) -> None:
    """The volume is in this trainer's format (volume_format.py) and its search is this
    job's, or adopted on request (ownership.py). The writer is the process that records
    the search: the chief, or a parallel search's oracle. A volume that fails (full, an
    I/O error) raises VolumeError."""
    from . import ownership, strategy, volume_format
    from .parallel import roles

    write = strategy.is_chief() and not roles.current().is_group
    with volume_errors(root):
        if write:
            root.mkdir(parents=True, exist_ok=True)
        volume_format.check_volume(root, write)
        ownership.check(root, spec, write)


def run_search(spec: TrainerSpec, checkpoint_dir: Path) -> int:
    from . import strategy as strategy_mod

    for path in spec.python_path:
        if path not in sys.path:
            sys.path.insert(0, path)
    from .parallel import roles

    role = roles.current()
    write = strategy_mod.is_chief()
    if write:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
    if spec.tuner.deterministic:
        os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
    strategy = strategy_mod.create(spec.strategy)  # before any other TF op
    if spec.tuner.deterministic:
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()

    from . import data as data_mod
    from .progress import Reporter

    reporter = Reporter(checkpoint_dir, write=write, tuner_id=role.progress_id)
    previous = reporter.previous() if write else None
    reporter.update(
        force=False,
        objective=spec.tuner.objective,
        direction=spec.tuner.direction,
        restores=previous.restores if previous else 0,
    )
    reporter.serve()
    try:
        try:
            import keras

            # A loader that draws random numbers draws the same ones after a restart.
            keras.utils.set_random_seed(spec.tuner.seed)
            if spec.tuner.dtype_policy:  # kept across clear_session by ktpatch
                keras.config.set_dtype_policy(spec.tuner.dtype_policy)
            dataset = data_mod.load(spec.data)
            from . import iterations

            # The loader's datasets are made before the search: their iteration counts
            # are the whole run's (tfdata.json), as for a script's top-level pipeline.
            iterations.boundary()
            _check_fingerprint(spec, dataset, checkpoint_dir, write, role)
            hypermodel = resolve_hypermodel(spec.hypermodel, dataset)
            return _search(spec, strategy, dataset, hypermodel, checkpoint_dir, reporter, write)
        except SpecError as exc:
            reporter.update(force=True, phase=PHASE_FAILED, message=str(exc))
            return fail(EXIT_INVALID_SPEC, str(exc))
    finally:
        reporter.close()


def _check_fingerprint(spec: TrainerSpec, dataset: Any, root: Path, write: bool, role: Any) -> None:
    """A resume must see the same data, hypermodel and search as the first run. With
    parallel trials the oracle records it and the trial groups compare with it."""
    import dataclasses

    from . import fingerprint

    record = {
        "data": dataset.digest(),
        "hypermodel": spec.hypermodel,
        "tuner": dataclasses.asdict(spec.tuner),
    }
    fields = {"data": "spec.data", "hypermodel": "spec.hypermodel", "tuner": "spec.tuner"}
    wait = role.oracle_wait_seconds if role.is_group else 0.0
    fingerprint.check_or_record(root, record, fields, write and not role.is_group, wait)


def _search(
    spec: TrainerSpec,
    strategy: Any,
    dataset: Any,
    hypermodel: Any,
    checkpoint_dir: Path,
    reporter: Any,
    write: bool,
) -> int:
    from . import parallel, results, tuners

    role = parallel.current()
    parallel.install(
        role, lambda oracle: reporter.update(force=True, **results.search_progress(oracle))
    )
    ctx = tuners.Context(spec, strategy, dataset, checkpoint_dir, reporter, write=write)
    try:
        with volume_errors(checkpoint_dir):  # also the oracle's and results' writes
            tuner = tuners.create(ctx, hypermodel)
            fields = results.search_progress(tuner.oracle)
            reporter.update(force=True, phase=PHASE_RUNNING, message="", **fields)
            try:
                tuner.search()
            except parallel.RoleDone:
                # the oracle after serving, or a trial group other than tuner0 after STOPPED
                reporter.update(force=True, phase=PHASE_COMPLETED, message="")
                log.info("%s: its part of the search is done", role.tuner_id)
                return EXIT_COMPLETED
            out = results.export(tuner, checkpoint_dir, write)
    except preemption.Preempted:
        reporter.update(force=True, phase=PHASE_PREEMPTED, message="preempted; resume me")
        log.warning("exiting %d (preempted); checkpoint written", EXIT_PREEMPTED)
        return EXIT_PREEMPTED
    except VolumeError as exc:  # retryable: the previous checkpoint is intact
        reporter.update(force=True, phase=PHASE_PREEMPTED, message=exc.message)
        return fail(EXIT_PREEMPTED, exc.message)
    except tuners.InvalidSearch as exc:
        reporter.update(force=True, phase=PHASE_FAILED, message=str(exc))
        return fail(EXIT_INVALID_SPEC, str(exc))
    except FormatMismatch as exc:
        reporter.update(force=True, phase=PHASE_FAILED, message=exc.message)
        return fail(EXIT_INVALID_SPEC, exc.message)
    except Exception as exc:
        message = summary(exc)
        log.exception("search failed")
        reporter.update(force=True, phase=PHASE_FAILED, message=message)
        return fail(EXIT_FAILED, message)
    log.info("search completed; best: %s", out["best"])
    pure = ctx.train_seconds - ctx.checkpoint_seconds
    if pure > 0:
        log.info(
            "checkpoints: %d written in %.3fs = %.2f%% overhead on %.3fs of training "
            "(%d steps in this process)",
            ctx.checkpoints,
            ctx.checkpoint_seconds,
            100 * ctx.checkpoint_seconds / pure,
            pure,
            ctx.steps,
        )
    fields = results.search_progress(tuner.oracle)
    reporter.update(force=True, phase=PHASE_COMPLETED, message="", **fields)
    results.write_final_summary(out, reporter.progress.trials_total, exits.TERMINATION_MESSAGE_PATH)
    return EXIT_COMPLETED


def resolve_hypermodel(ref: str, dataset: Any) -> Any:
    """A "pkg.module:Name" reference → something keras-tuner accepts: a HyperModel instance or a
    build(hp) function. A HyperModel class is instantiated with input_shape/output_shape
    when its constructor takes them (the data's shapes), else without arguments."""
    import keras_tuner

    from .data import import_ref

    try:
        obj = import_ref(ref, "spec.hypermodel")
    except SpecError:
        raise
    except Exception as exc:  # the user's module raised at import time
        message = f"importing {ref} raised {type(exc).__name__}: {exc}"
        raise SpecError("spec.hypermodel", message) from exc
    if inspect.isclass(obj) and issubclass(obj, keras_tuner.HyperModel):
        params = inspect.signature(obj).parameters
        kwargs = {}
        if "input_shape" in params:
            kwargs["input_shape"] = dataset.input_shape
        if "output_shape" in params:
            kwargs["output_shape"] = dataset.output_shape
        try:
            return obj(**kwargs)
        except Exception as exc:
            raise SpecError("spec.hypermodel", f"{ref}(**{kwargs}) raised {exc}") from exc
    if isinstance(obj, keras_tuner.HyperModel) or (callable(obj) and not inspect.isclass(obj)):
        return obj
    raise SpecError(
        "spec.hypermodel",
        f"{ref} is a {type(obj).__name__}; expected a HyperModel subclass, a HyperModel "
        "instance or a build(hp) function",
    )
