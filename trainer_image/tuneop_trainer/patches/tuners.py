"""keras-tuner, changed for the user's tuners in exec mode (installed before the script
runs, for every tuner class: the four built-in ones and user subclasses).

- `BaseTuner.__init__`: the project goes under `<DIR>/tuner/` whatever `directory=`
  says, in a place from the tuner's place in the script (projects.py: several
  tuners, `overwrite=True` and resumes keep their meaning); the tuner is saved right
  after construction (keras-tuner writes `tuner0.json` only at a trial's end, so a kill
  in the first trial would start a new search); construction draws nothing from the
  script's random streams (seeds.isolated); the hypermodel's `build` runs in the
  trainer's strategy scope with a seed derived from the oracle's seed, the trial and
  the build's ordinal (isolated too), then the scope guard's check; the trials named
  in TUNEOP_FAILED_TRIALS are recorded FAILED (failed_trials.py).
- `Tuner.__init__`: `distribution_strategy` is the trainer's strategy, except for a
  tuner that trains with a loop of the script's own and was given none (loops.py).
- `BaseTuner.search`: a phase of the script for counting input iterations
  (iterations.py).
- `BaseTuner._try_run_and_update_trial`: tells the Runtime which trial of which tuner
  runs (fit checkpoints live under `trials/<key>/<id>/`), seeds the trial in isolation
  from the script's generators, and stops between trials on SIGTERM (the oracle's state
  is on disk).
- `BaseTuner.on_trial_end`: progress (trials completed, best so far); a COMPLETED
  trial's fits keep only their final checkpoint (the oracle never re-runs the trial;
  keras-tuner keeps its own best-epoch weights), so the volume holds one state per trial.
- keras-tuner's `SaveBestEpoch` writes the best epoch's weights atomically and durably.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import keras
import keras_tuner
import numpy as np
from keras_tuner.src.engine import base_tuner, tuner_utils
from keras_tuner.src.engine import tuner as tuner_module
from keras_tuner.src.engine.trial import TrialStatus
from tuneop_contract import ENV_TUNER_ID, TUNER_DIR, write_atomic

from .. import failed_trials, parallel, preemption, scope, seeds
from ..checkpoint import CheckpointStore, volume_errors
from ..data.inputs import iterations
from ..engine import loops, runtime
from ..engine.projects import Placement
from ..report.results import planned_trials, search_progress
from ..strategy import barrier

log = logging.getLogger(__name__)

_installed = False


class ScriptScopeError(keras_tuner.errors.FatalError):  # type: ignore[misc]
    """A model or optimizer built outside the strategy (exit 2)."""


def _rt() -> runtime.Runtime:
    rt = runtime.current()
    if rt is None:
        raise RuntimeError("tuneop exec runtime is not installed")
    return rt


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    _patch_base_init()
    _patch_tuner_init()
    _patch_search()
    _patch_trial_run()
    _patch_trial_end()
    _patch_save_best_epoch()
    _patch_hyperband_build()


def _patch_base_init() -> None:
    original = base_tuner.BaseTuner.__init__

    @functools.wraps(original)
    def __init__(
        self: Any,
        oracle: Any,
        hypermodel: Any = None,
        directory: Any = None,
        project_name: Any = None,
        overwrite: bool = False,
        **kwargs: Any,
    ) -> None:
        rt = _rt()
        project_name = project_name or "untitled_project"
        target = rt.root / TUNER_DIR
        if directory not in (None, str(target)):
            log.info(
                "tuner %r: directory=%r is replaced by %s (the checkpoint volume)",
                project_name,
                directory,
                target,
            )
        placement = _place(rt, project_name, bool(overwrite))
        self._tuneop_key = placement.key
        project_dir = rt.projects.project_dir(placement)
        fresh = not (project_dir / tuner_file()).exists()
        # A fresh tuner builds the model to see its space, a reloaded one does not:
        # neither draws from the script's random streams.
        with seeds.isolated():
            original(
                self,
                oracle,
                hypermodel=hypermodel,
                directory=str(project_dir.parent),
                project_name=project_name,
                overwrite=False,  # projects.py has started it afresh if it must
                **kwargs,
            )
        if self.hypermodel is not None:
            _own_loop_unscoped(self, rt)
            _wrap_build(self)
        if fresh and rt.write:
            self.save()
        local = parallel.local_oracle(self.oracle)  # a trial group's client: the oracle's
        if local is not None:
            failed_trials.apply(local)  # out of memory before: ended, not retried
        rt.tuners.append(self)
        barrier(rt.strategy)

    base_tuner.BaseTuner.__init__ = __init__


def tuner_file() -> str:
    """keras-tuner's tuner file name in the project: `<tuner id>.json` (it reloads a
    project only if that file exists; the oracle's is `chief.json`)."""
    return f"{os.environ.get(ENV_TUNER_ID) or 'tuner0'}.json"


def _place(rt: runtime.Runtime, project_name: str, overwrite: bool) -> Placement:
    """The construction's placement, the same in every worker of a group: the chief
    decides and records it, the other workers read its record once it has (a worker
    deciding on its own could see the volume at another moment, e.g. before or after
    the chief started a search on it, and seed its replica differently)."""
    if rt.write:
        placement = rt.projects.place(project_name, overwrite, rt.script)
    barrier(rt.strategy)
    if not rt.write:
        rt.projects.reload()
        placement = rt.projects.place(project_name, overwrite, rt.script)
    return placement


def _patch_tuner_init() -> None:
    original = tuner_module.Tuner.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        rt = _rt()
        given = kwargs.get("distribution_strategy")
        if given is not None and given is not rt.strategy:
            log.info("distribution_strategy=%r is replaced by the trainer's strategy", given)
        kwargs["distribution_strategy"] = rt.strategy
        self._tuneop_strategy_given = given is not None
        original(self, *args, **kwargs)
        if getattr(self, "_tuneop_unscoped", False):
            self.distribution_strategy = None  # keras-tuner builds and fits without it

    tuner_module.Tuner.__init__ = __init__


def _own_loop_unscoped(tuner: Any, rt: runtime.Runtime) -> None:
    """A tuner training with a loop of the script's own, given no strategy: its builds
    run as written, outside the trainer's strategy (loops.py)."""
    if getattr(tuner, "_tuneop_strategy_given", False):
        return
    where = loops.own_loop(tuner)
    if where is None:
        return
    tuner._tuneop_unscoped = True
    if rt.strategy.num_replicas_in_sync > 1:
        log.warning(
            "%s trains without Model.fit: its trials run as written, on one device, "
            "without the trainer's %s (%d replicas), and a kill restarts the trial; pass "
            "distribution_strategy= to the tuner to run them under it",
            where,
            type(rt.strategy).__name__,
            rt.strategy.num_replicas_in_sync,
        )


def _wrap_build(tuner: Any) -> None:
    hypermodel = tuner.hypermodel
    original = hypermodel.build

    @functools.wraps(original)
    def build(hp: Any, *args: Any, **kwargs: Any) -> Any:
        rt = _rt()
        seed = parallel.config_oracle(tuner.oracle).seed
        with seeds.isolated():
            keras.utils.set_random_seed(rt.next_build_seed(int(seed or 0)))
            if getattr(tuner, "_tuneop_unscoped", False):
                return original(hp, *args, **kwargs)
            with rt.strategy.scope():
                model = original(hp, *args, **kwargs)
        if isinstance(model, keras.Model) and getattr(model, "optimizer", None) is not None:
            try:
                scope.check_model(model, rt.strategy)
            except scope.ScopeError as exc:
                raise ScriptScopeError(
                    str(exc).replace("spec.hypermodel: ", f"{rt.script}: ", 1)
                ) from exc
        return model

    hypermodel.build = build


def _trial_seed(tuner: Any, trial_id: str) -> int:
    text = f"{parallel.config_oracle(tuner.oracle).seed}/trial/{trial_id}"
    return seeds.derive(text)


def _patch_search() -> None:
    """A search starts and ends a phase of the script (iterations.py): data sets made
    after it (for a final fit) are new, whether or not a resumed process ran trials."""
    original = base_tuner.BaseTuner.search

    @functools.wraps(original)
    def search(self: Any, *args: Any, **kwargs: Any) -> Any:
        iterations.boundary()
        try:
            return original(self, *args, **kwargs)
        finally:
            iterations.boundary()

    base_tuner.BaseTuner.search = search


def _patch_trial_run() -> None:
    original = base_tuner.BaseTuner._try_run_and_update_trial

    @functools.wraps(original)
    def _try_run_and_update_trial(self: Any, trial: Any, *args: Any, **kwargs: Any) -> Any:
        rt = _rt()
        if preemption.requested():
            raise preemption.Preempted()
        rt.begin_trial(self._tuneop_key, trial.trial_id)
        rt.reporter.update(
            force=True,
            trial_id=str(trial.trial_id),
            execution=0,
            epoch=0,
            step=0,
            trials_total=planned_trials(parallel.config_oracle(self.oracle)),
        )
        # The operator learns which trial runs before its model is built: a model whose
        # hyperparameters run the trainer out of memory is then named as this trial
        # (status.oomTrials), not the one before.
        rt.reporter.flush()
        try:
            with seeds.isolated():  # the trial's seeding is not the script's
                keras.utils.set_random_seed(_trial_seed(self, str(trial.trial_id)))
                return original(self, trial, *args, **kwargs)
        finally:
            rt.end_trial()

    base_tuner.BaseTuner._try_run_and_update_trial = _try_run_and_update_trial


def _patch_trial_end() -> None:
    original = base_tuner.BaseTuner.on_trial_end

    @functools.wraps(original)
    def on_trial_end(self: Any, trial: Any) -> None:
        original(self, trial)
        rt = _rt()
        if rt.write and getattr(trial, "status", None) == TrialStatus.COMPLETED:
            rt.flush_checkpoints()
            for fit_dir in rt.trial_path(self._tuneop_key, trial.trial_id).glob("fit-*"):
                CheckpointStore(fit_dir).remove(keep=1)
        report_search(self)

    base_tuner.BaseTuner.on_trial_end = on_trial_end


def report_search(tuner: Any, force: bool = True) -> None:
    """Trials completed and the best so far, from the oracle (restart-safe); a parallel
    search's trial group has only the planned count (the oracle reports the rest)."""
    oracle = tuner.oracle
    fields: dict[str, Any] = {
        "objective": _objective_name(oracle),
        "direction": _objective_direction(oracle),
        **search_progress(oracle),
    }
    _rt().reporter.update(force=force, **fields)


def _objective_name(oracle: Any) -> str | None:
    objective = oracle.objective
    return str(getattr(objective, "name", None) or "") or None


def _objective_direction(oracle: Any) -> str | None:
    return getattr(oracle.objective, "direction", None)


def _patch_save_best_epoch() -> None:
    def _save_model(self: Any) -> None:
        rt = _rt()
        if not rt.write:
            return
        path = Path(self.filepath)
        for pattern in (f".tmp-*-{path.name}", f".{path.name}.*.tmp"):  # a killed writer's
            for stale in path.parent.glob(pattern):
                stale.unlink(missing_ok=True)
        # A full volume is the infrastructure's failure, not the trial's: VolumeError
        # passes keras-tuner (exit 75, the previous best epoch intact).
        with volume_errors(path):
            write_atomic(path, _weights_h5(self.model))

    tuner_utils.SaveBestEpoch._save_model = _save_model


def _weights_h5(model: Any) -> bytes:
    """`model.save_weights(<x>.weights.h5)`'s bytes, made in memory: HDF5 writing to a
    volume that fills under it can crash the process (SIGSEGV while closing the file)
    instead of raising, so the file is written by Python, where ENOSPC is an OSError."""
    from keras.src.saving import saving_lib

    buffer = io.BytesIO()
    store = saving_lib.H5IOStore(buffer, mode="w")
    saving_lib._save_state(
        model, weights_store=store, assets_store=None, inner_path="", visited_saveables=set()
    )
    store.close()
    return buffer.getvalue()


def _patch_hyperband_build() -> None:
    """With Runtime.keep_optimizer a promoted Hyperband trial continues the previous
    round's best epoch with its optimizer state too (slots, iteration count: a
    learning-rate schedule goes on). Keras 3 keeps the optimizer's variables in the
    best epoch's `.weights.h5` already, but keras-tuner loads it into a model whose
    optimizer is not built yet, so Keras skips them (warning "Skipping variable loading
    for optimizer"); here the optimizer is built in the strategy scope and the file
    loaded again."""
    from keras_tuner.src.tuners import hyperband

    original = hyperband.Hyperband._build_hypermodel

    @functools.wraps(original)
    def _build_hypermodel(self: Any, hp: Any) -> Any:
        rt = _rt()
        previous = hp.values.get("tuner/trial_id")
        if not rt.keep_optimizer or previous is None:
            return original(self, hp)
        with warnings.catch_warnings():  # the skip is undone just below
            warnings.filterwarnings("ignore", "Skipping variable loading for optimizer")
            model = original(self, hp)
        with rt.strategy.scope():
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
            model.load_weights(self._get_checkpoint_fname(previous))
        state = hashlib.sha256()
        for variable in model.optimizer.variables:
            state.update(np.asarray(variable.numpy()).tobytes())
        log.info(
            "continuing trial %s's best epoch: weights and optimizer state "
            "(iteration %d, optimizer sha256 %s)",
            previous,
            int(model.optimizer.iterations.numpy()),
            state.hexdigest(),
        )
        return model

    hyperband.Hyperband._build_hypermodel = _build_hypermodel
