"""The engine's process: run a Program (a user's script, modes/script.py, or a TuningJob
spec's search, modes/tuningjob.py) under the runtime and the patched Keras and keras-tuner, and
map how it ends to the contract's exit codes: 0 it finished (or called `sys.exit(0)`),
75 preempted (SIGTERM: checkpoint written; a volume error; a lost peer), 2 something
tuneop cannot run or resume (a changed script or data, a model built outside the
strategy, a spec error found while running: one line naming what), 1 the program raised
(one line: where, the error). Both one-liners also go to the termination-message path.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuneop_contract import (
    EXIT_COMPLETED,
    EXIT_FAILED,
    EXIT_INVALID_SPEC,
    EXIT_PREEMPTED,
    PHASE_COMPLETED,
    PHASE_FAILED,
    PHASE_PREEMPTED,
    PHASE_RUNNING,
    RESULTS_FILE,
    write_atomic,
)
from tuneop_contract.spec import Checkpoint, SpecError

from .. import exits, parallel, patches, preemption, strategy
from ..checkpoint import VOLUME_ERRNOS, VolumeError, volume_errors
from ..checkpoint.volume_format import FormatMismatch
from ..data.inputs.base import ResumeMismatch, UnsupportedFit
from ..engine import fit, runtime
from ..engine.projects import RECORD as PROJECTS_RECORD
from ..engine.projects import Projects
from ..engine.runtime import Runtime
from ..exits import fail
from ..patches import tuners
from ..report.progress import Reporter, carried_on
from ..report.results import collect, export, search_progress, write_final_summary

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Program:
    """What the trainer runs under the runtime: a user's script (modes/script.py), or a
    TuningJob spec's search made into the same thing (modes/tuningjob.py). Both go through
    the same patched keras-tuner and Keras (one engine); only how they start differs."""

    name: str  # named in messages: the script's file name, or "spec.hypermodel"
    execute: Callable[[Runtime], tuple[int, str]]  # (exit code, one-line message)
    check: Callable[[Path, bool, float], None] | None = None  # the search's fingerprint
    seed: int = 0  # Python, NumPy and TensorFlow seeded with it before `execute`
    export_model: bool = False  # best_model.keras and its weights' digest in results.json
    keep_optimizer: bool = False  # Hyperband promotions continue the optimizer state


def run_program(
    program: Program,
    checkpoint_dir: Path,
    checkpoint: Checkpoint,
    deterministic: bool,
    strategy_name: str,
) -> int:
    """Create the strategy, the progress reporter and the runtime, install the engine's
    patches, run `program` and turn its outcome into the contract's exit code."""
    role = parallel.current()
    write = strategy.is_chief()
    if write:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
    if deterministic:
        os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
    try:
        created = strategy.create(strategy_name)  # before any other TF op
    except preemption.Preempted:  # SIGTERM while waiting for the group's peers
        return EXIT_PREEMPTED
    if deterministic:
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()

    reporter = Reporter(checkpoint_dir, write=write, tuner_id=role.progress_id)
    carried = carried_on(reporter.previous() if write else None)  # before anything writes
    reporter.serve()  # /metrics and /progress answer while a trial group waits for its oracle
    try:
        try:
            _check(program, checkpoint_dir, write, role)
            # The search's record so far, once the volume is known to be this job's own
            # (a job refused for another job's search must not show that search's
            # trials), and before anything else reports (the runtime reports its
            # checkpoint cadence): a new process never says 0 trials done.
            reporter.update(force=True, phase=PHASE_RUNNING, message="", **carried)
            rt = runtime.Runtime(
                root=checkpoint_dir,
                checkpoint=checkpoint,
                strategy=created,
                reporter=reporter,
                write=write,
                script=program.name,
                keep_optimizer=program.keep_optimizer,
            )
            _start(program, rt, role)
        except (SpecError, VolumeError, preemption.Preempted, OSError) as exc:
            return _not_started(reporter, exc)
        # Python, NumPy and TensorFlow seeded before the program's first line: unseeded
        # random data or an unseeded tf.data shuffle is the same in every process (the
        # script's own seeding, if any, takes over).
        import keras

        keras.utils.set_random_seed(program.seed)
        code, message = program.execute(rt)
        return _finish(program, rt, role, code, message)
    finally:
        runtime.install(None)
        reporter.close()


def _not_started(reporter: Reporter, exc: BaseException) -> int:
    """How a trainer that could not start its search ends: a spec error (exit 2); the
    volume refusing a write or a SIGTERM during start-up (exit 75: retryable, nothing
    was lost; no record is published, as the check that lets it carry on the search's
    may not have run: the termination message says it all). Any other OSError is
    raised."""
    if isinstance(exc, SpecError):
        reporter.update(force=True, phase=PHASE_FAILED, message=str(exc))
        return fail(EXIT_INVALID_SPEC, str(exc))
    if isinstance(exc, OSError) and exc.errno not in VOLUME_ERRNOS:
        raise exc
    if isinstance(exc, OSError):
        exc = VolumeError(exc.filename or "/", exc)
    if isinstance(exc, VolumeError):
        return fail(EXIT_PREEMPTED, exc.message)
    return EXIT_PREEMPTED


def _check(program: Program, root: Path, write: bool, role: Any) -> None:
    """The search on the volume is this job's (with parallel trials the oracle records
    it, the trial groups compare): SpecError if not."""
    if program.check is not None:
        wait = role.oracle_wait_seconds if role.is_group else 0.0
        program.check(root, write and not role.is_group, wait)


def _start(program: Program, rt: Runtime, role: Any) -> None:
    """The tuners' placements and the patches to Keras and keras-tuner."""
    write = rt.write
    rt.projects = Projects(
        rt.root, role.own_file(PROJECTS_RECORD), write=write, parallel=role.parallel
    )
    runtime.install(rt)
    patches.install(
        patches.Context(
            strategy=rt.strategy,
            write=write,
            role=role,
            script=program.name,
            on_oracle_change=lambda o: rt.reporter.update(force=True, **search_progress(o)),
        )
    )


def _finish(program: Program, rt: Runtime, role: Any, code: int, message: str) -> int:
    """Durable checkpoints, results.json and the final progress for how it ended."""
    reporter = rt.reporter
    if code != EXIT_PREEMPTED:
        try:
            rt.flush_checkpoints()
        except VolumeError as exc:
            code, message = EXIT_PREEMPTED, exc.message
    if code == EXIT_PREEMPTED:
        reporter.update(
            force=True, phase=PHASE_PREEMPTED, message=message or "preempted; resume me"
        )
        if message:  # the volume failed: say so in the termination message
            return fail(code, message)
        log.warning("exiting %d (preempted); checkpoint written", EXIT_PREEMPTED)
        return code
    results = None
    # with parallel trials the post-search code and the results are tuner0's
    if rt.tuners and role.runs_post_search:
        try:
            tuners.report_search(rt.tuners[-1])
            results = _write_results(rt, program.export_model)
        except FormatMismatch as exc:
            code, message = EXIT_INVALID_SPEC, exc.message
        except VolumeError as exc:
            code, message = EXIT_PREEMPTED, exc.message
    if code != EXIT_COMPLETED:
        phase = PHASE_PREEMPTED if code == EXIT_PREEMPTED else PHASE_FAILED
        reporter.update(force=True, phase=phase, message=message)
        return fail(code, message)
    _log_overhead(rt)
    reporter.update(force=True, phase=PHASE_COMPLETED, message="")
    if results is not None:
        log.info("search completed; best: %s", results["best"])
        trials_total = reporter.progress.trials_total
        write_final_summary(results, trials_total, exits.TERMINATION_MESSAGE_PATH)
    return EXIT_COMPLETED


def _log_overhead(rt: Runtime) -> None:
    pure = rt.train_seconds - rt.checkpoint_seconds
    if pure <= 0:
        return
    log.info(
        "checkpoints: %d written in %.3fs = %.2f%% overhead on %.3fs of training "
        "(%d steps in this process)",
        rt.checkpoints,
        rt.checkpoint_seconds,
        100 * rt.checkpoint_seconds / pure,
        pure,
        rt.steps,
    )


def outcome(
    body: Callable[[], Any], name: str, describe: Callable[[BaseException], str]
) -> tuple[int, str]:
    """(exit code, one-line message) of running `body`, the program `name`: how a
    program under the engine ended, in the contract's terms; `describe` says where an
    error came from."""
    import keras_tuner

    try:
        body()
    except preemption.Preempted:
        return EXIT_PREEMPTED, ""
    except VolumeError as exc:  # retryable: the previous checkpoint is intact
        return EXIT_PREEMPTED, exc.message
    except FormatMismatch as exc:
        return EXIT_INVALID_SPEC, exc.message
    except parallel.RoleDone:  # the oracle, or a trial group other than tuner0
        return EXIT_COMPLETED, ""
    except SystemExit as exc:
        if exc.code is None or exc.code == 0:
            return EXIT_COMPLETED, ""
        if isinstance(exc.code, int):
            return exc.code, f"{name} exited with status {exc.code}"
        return EXIT_FAILED, f"{name}: {exc.code}"
    except (
        ResumeMismatch,
        UnsupportedFit,
        fit.InvalidSearch,
        tuners.ScriptScopeError,
        SpecError,
    ) as exc:
        return EXIT_INVALID_SPEC, str(exc)
    except strategy.PeerLost:
        return EXIT_PREEMPTED, ""
    except OSError as exc:
        if exc.errno in VOLUME_ERRNOS:  # e.g. keras-tuner's own files on a full volume
            return EXIT_PREEMPTED, VolumeError(exc.filename or "/", exc).message
        log.error("the search raised:\n%s", "".join(traceback.format_exception(exc)))
        return EXIT_FAILED, describe(exc)
    except keras_tuner.errors.FatalError as exc:
        return EXIT_FAILED, describe(exc)
    except Exception as exc:
        log.error("the search raised:\n%s", "".join(traceback.format_exception(exc)))
        return EXIT_FAILED, describe(exc)
    return EXIT_COMPLETED, ""


def _write_results(rt: Any, export_model: bool) -> dict[str, Any] | None:
    """results.json (chief only; with `export_model` also best_model.keras, which every
    worker saves as the multi-worker pattern asks); the results written, for the final
    summary."""
    tuner = rt.tuners[-1]
    if export_model:
        with volume_errors(rt.root):
            return export(tuner, rt.root, rt.write, rt.strategy)
    if not rt.write:
        return None
    try:
        results = collect(tuner)
    except Exception as exc:  # the results file must not turn a finished search red
        log.warning("cannot collect results: %s", exc)
        return None
    write_atomic(rt.root / RESULTS_FILE, json.dumps(results, indent=2).encode())
    return results
