"""keras-tuner subclasses whose trials survive a kill at any instant and resume exactly.

What keras-tuner 1.4.8 does by itself (read in its source): it reloads a project only if
`<tuner_id>.json` exists, and writes that file only at the end of a trial, so a kill
during the first trial loses the search; a trial RUNNING at the kill is put on the
retry queue and re-run from scratch with the same hyperparameters; Hyperband loads the
previous round's best weights but not the optimizer state; its JSON files are written in
place (not atomically). `ResumableMixin` changes exactly that:

- the tuner (and so the oracle) is saved right after construction;
- the trials named in TUNEOP_FAILED_TRIALS (out of memory in an earlier pod group) are
  then recorded FAILED instead of retried (failed_trials.py);
- keras-tuner's JSON writes go through `tuneop_contract.write_atomic`;
- `run_trial` is our own loop, one `model.fit(epochs=1)` per epoch over the remaining
  batches of a permutation that is a pure function of (seed, execution, epoch), so the
  data position is (epoch, step); the batches are gathered one at a time from the arrays
  (batches.py), never a per-epoch copy of the training set; a checkpoint
  (checkpoint.py) is written every N steps and/or S seconds, at every epoch end and on
  SIGTERM, written in the background (the training thread waits only for the copy to
  host memory); on restart the RUNNING trial is retried by the oracle and `run_trial`
  continues from its latest checkpoint, merging the metric history so the objective
  covers every epoch;
- each trial keeps its best epoch's full state (weights + optimizer), a hard link to that
  epoch-end checkpoint's state file; a Hyperband promotion starts from it, optimizer state
  included; the best model is exported from it. A finished execution's own checkpoints
  are deleted (done.json holds its history): the volume holds one state per trial;
- a loader's `tf.data` datasets (`StreamData`) are iterated by Keras's own epoch rules
  (tfdata.py): the checkpoint holds the iteration state, a resume replays the
  iterators made before (iterations.py) and skips the batches already trained;
- a volume error (disk full) while writing raises VolumeError: exit 75, never a FAILED trial;
- every build and restore runs inside `strategy.scope()` through the scope guard.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import keras
import keras_tuner
import numpy as np
from tuneop_contract import ENV_TUNER_ID, TENSORBOARD_DIR, TRIALS_DIR, TUNER_DIR, write_atomic

from . import (
    early_stopping,
    end_of_data,
    failed_trials,
    iterations,
    ktpatch,
    multiworker,
    parallel,
    preemption,
    scope,
    seeds,
    tfdata,
)
from .batches import Gathered, as_keras, gathered, parts
from .cadence import Cadence, mtbf_from_env
from .checkpoint import (
    BackgroundWriter,
    CheckpointStore,
    SaveDone,
    model_state,
    restore_metrics,
    restore_state,
    volume_errors,
)
from .data import Dataset, StreamData, epoch_order
from .progress import Reporter
from .spec import TrainerSpec
from .trial_board import TrialBoard

log = logging.getLogger(__name__)


ktpatch.install()


class InvalidSearch(keras_tuner.errors.FatalError):  # type: ignore[misc]
    """A spec/hypermodel problem found while running; keras-tuner re-raises FatalError
    instead of recording a failed trial. The message names the field."""


@dataclasses.dataclass
class Context:
    """What run_trial needs besides the trial (keras-tuner passes only *args/**kwargs)."""

    spec: TrainerSpec
    strategy: Any
    data: Dataset | StreamData
    root: Path
    reporter: Reporter
    write: bool = True  # False on non-chief workers
    checkpoint_seconds: float = 0.0  # training-thread time spent on checkpoints (this process)
    checkpoints: int = 0
    train_seconds: float = 0.0  # epochs incl. validation and checkpoints (this process)
    steps: int = 0  # training steps run by this process
    writer: BackgroundWriter = dataclasses.field(init=False)
    cadence: Cadence = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.cadence = Cadence(self.spec.checkpoint, mtbf_from_env())
        self.writer = BackgroundWriter(self.root, self._saved)
        self.reporter.update(**self.cadence.report())

    def _saved(self, done: SaveDone) -> None:
        self.cadence.written(done.cpu_seconds)
        self.reporter.saved(done, self.cadence.report())


class ResumableMixin:
    ctx: Context

    def __init__(self, *args: Any, context: Context, **kwargs: Any) -> None:
        self.ctx = context
        self._best_values: dict[str, float | None] = {}  # best objective per trial, as saved
        self._board: TrialBoard | None = None  # the running execution's TensorBoard run
        ktpatch.set_writer(context.write)
        project = Path(kwargs["directory"]) / kwargs["project_name"]
        fresh = not (project / tuner_file()).exists()
        super().__init__(*args, **kwargs)
        if fresh and context.write:
            # keras-tuner writes tuner0.json only at trial end; without it a restart
            # during the first trial would start a new search.
            self.save()  # type: ignore[attr-defined]
        # trials the operator names as out of memory are ended, not retried (every worker
        # alike; only the chief writes). A parallel search's trial group has no trials:
        # the oracle applies them, and the group's client ends one it is handed.
        local = parallel.local_oracle(self.oracle)  # type: ignore[attr-defined]
        if local is not None:
            failed_trials.apply(local)
        # Every worker has now loaded the same state; none writes before all have.
        multiworker.barrier(context.strategy)

    # -- paths ------------------------------------------------------------------
    def _trial_dir(self, trial_id: str) -> Path:
        return self.ctx.root / TRIALS_DIR / str(trial_id)

    def _best_store(self, trial_id: str) -> CheckpointStore:
        return CheckpointStore(self._trial_dir(trial_id) / "best", keep=2)

    # -- model building ---------------------------------------------------------
    def _seed(self, trial_id: str, execution: int) -> int:
        text = f"{self.ctx.spec.tuner.seed}/{trial_id}/{execution}"
        return seeds.derive(text)

    def _build(self, hp: Any, seed: int) -> Any:
        keras.backend.clear_session()
        keras.utils.set_random_seed(seed)
        try:
            model = scope.build_in_scope(self.hypermodel, hp, self.ctx.strategy)  # type: ignore[attr-defined]
        except scope.ScopeError as exc:
            raise InvalidSearch(str(exc)) from exc
        data = self.ctx.data
        bs = self.ctx.spec.tuner.batch_size
        if isinstance(data, StreamData):
            batch = tfdata.spec_batch(data.train.element_spec)
        else:  # one batch as real arrays (the data may be memory-mapped shards)
            batch = (as_keras(data.x[:bs]), as_keras(data.y[:bs]), None)
        with self.ctx.strategy.scope():
            # Create optimizer slots and metric accumulators now (Keras creates them
            # lazily at the first step) so save/restore see the complete state.
            model._symbolic_build(data_batch=batch)
            model.optimizer.build(model.trainable_variables)
        scope.check_model(model, self.ctx.strategy)
        return model

    # -- one trial ----------------------------------------------------------------
    def run_trial(self, trial: Any, *args: Any, **kwargs: Any) -> list[Any]:
        histories = []
        with volume_errors(self.ctx.root):
            for execution in range(self.ctx.spec.tuner.executions_per_trial):
                histories.append(self._run_execution(trial, execution))
        return histories

    def _epochs(self, hp: Any) -> tuple[int, int]:
        values = hp.values
        if "tuner/epochs" in values:  # Hyperband
            return int(values.get("tuner/initial_epoch", 0)), int(values["tuner/epochs"])
        return 0, self.ctx.spec.tuner.max_epochs

    def _run_execution(self, trial: Any, execution: int) -> Any:
        ctx, spec = self.ctx, self.ctx.spec
        tid = trial.trial_id
        hp = trial.hyperparameters
        exec_dir = self._trial_dir(tid) / f"exec-{execution}"
        done = exec_dir / "done.json"
        store = CheckpointStore(exec_dir, keep=spec.checkpoint.keep)
        stream_data = ctx.data if isinstance(ctx.data, StreamData) else None
        if done.exists():  # finished before the kill: reuse, do not retrain
            record = json.loads(done.read_text())
            if stream_data is not None:  # the iterators it made, for the executions after
                train = stream_data.train
                iterations.catch_up(train, int(record["datasetIterations"]), lambda: iter(train))
            if ctx.write:
                store.remove()  # in case the kill came between done.json and the prune
            return _history(record["history"], record["initialEpoch"])
        initial_epoch, epochs = self._epochs(hp)
        model = self._build(hp, self._seed(tid, execution))

        epoch, step = initial_epoch, 0
        history: dict[str, list[float]] = {}
        pending_metrics: dict[str, np.ndarray] | None = None
        found = store.latest()
        stream = None if stream_data is None else tfdata.Stream(stream_data.train, None)
        if found is not None:
            arrays, meta, path = found
            t0 = time.monotonic()
            with ctx.strategy.scope():
                restore_state(model, arrays, ("model", "optimizer"))
            epoch, step, history = meta["epoch"], meta["step"], meta["history"]
            if stream is not None:
                try:
                    stream.restore(meta["datasetStream"])
                except tfdata.ShorterThanCheckpoint as exc:
                    raise InvalidSearch(
                        f"spec.data.loader: the training dataset changed since the "
                        f"checkpoint in {exec_dir}: {exc}"
                    ) from exc
            pending_metrics = arrays if step > 0 else None
            log.info(
                "trial %s execution %d: restored %s at epoch %d step %d in %.3fs",
                tid,
                execution,
                path.name,
                epoch,
                step,
                time.monotonic() - t0,
            )
            ctx.reporter.metrics.restores.inc()
            ctx.reporter.update(
                force=True,
                resumed_from_step=step,
                resumed_from_epoch=epoch,
                restores=ctx.reporter.progress.restores + 1,
            )
        elif "tuner/trial_id" in hp.values:
            # Hyperband promotion: continue from the earlier trial's best epoch,
            # weights AND optimizer state (keras-tuner would reload weights only).
            prev = hp.values["tuner/trial_id"]
            best = self._best_store(prev).latest()
            if best is None:
                raise InvalidSearch(f"Hyperband: no saved state for promoted trial {prev}")
            with ctx.strategy.scope():
                restore_state(model, best[0], ("model", "optimizer"))
            log.info("trial %s: continuing trial %s from epoch %d", tid, prev, initial_epoch)
        ctx.reporter.update(
            force=True, trial_id=str(tid), execution=execution, epoch=epoch, step=step
        )
        board = self._board = (
            TrialBoard(ctx.root, exec_dir, tid, execution)
            if spec.tuner.tensorboard and ctx.write
            else None
        )
        if board is not None:
            board.begin(hp, None if found is None else found[1])
        rule = spec.tuner.early_stopping
        key = ""
        if stream is None:
            data = ctx.data
            assert isinstance(data, Dataset)
            bs = spec.tuner.batch_size
            steps = len(data.x) // bs  # drop the remainder: fixed batch shapes, exact positions
            if steps == 0:
                raise InvalidSearch(
                    f"spec.tuner.batchSize: {bs} is larger than the {len(data.x)} training samples"
                )
            validation = gathered(parts(data.x_val, data.y_val), np.arange(len(data.x_val)), bs)
            training = Gathered(parts(data.x, data.y), bs)
        else:
            assert stream_data is not None
            key = f"spec.data:{stream.dataset.element_spec}"  # its count in tfdata.json
            if found is None:
                stream.start(iterations.before_fit(stream.dataset, ctx.root, key))
            validation = tfdata.data_sharded(stream_data.validation, ctx.strategy)
            # Built already (`_build`): under a strategy Keras's first-batch peek would
            # take a batch of the stream.
            model._maybe_symbolic_build = lambda *_, **__: None
        while epoch < epochs:
            stop = rule is not None and rule.monitor in history
            if stop and early_stopping.should_stop(history[rule.monitor], rule):  # type: ignore[union-attr]
                log.info("trial %s exec %d: early stopping after epoch %d", tid, execution, epoch)
                break
            total: int | None
            if stream is None:
                order = epoch_order(len(data.x), spec.tuner.seed, execution, epoch)
                batches, count = training.epoch(order[step * bs : steps * bs])
                total = steps
            else:  # the epoch's length: unknown (None) until the dataset first runs out
                batches, count = stream.pipeline, stream.begin_epoch(step)
                total = stream.planned
            callback = _StepCallback(
                self, store, epoch, step, total, history, pending_metrics, stream
            )
            resumed_metrics, pending_metrics = pending_metrics, None
            t_fit = time.monotonic()
            fit = model.fit(
                batches,
                steps_per_epoch=count,
                epochs=1,
                shuffle=False,
                verbose=0,
                validation_data=validation,
                callbacks=[callback],
            )
            logs = {k: float(v[-1]) for k, v in fit.history.items()}
            if resumed_metrics is not None and callback.trained == step:
                # Resumed after the epoch's last batch (a length not known yet when
                # the checkpoint was written): Keras reports no training metrics for
                # a fit without batches; they are the checkpoint's accumulators.
                with ctx.strategy.scope():
                    restore_metrics(model, resumed_metrics)
                train = {k: float(v) for k, v in model.get_metrics_result().items()}
                logs = {**train, **logs}
            if rule is not None and rule.monitor not in logs:
                raise InvalidSearch(
                    f'spec.tuner.earlyStopping.monitor: "{rule.monitor}" is not produced by '
                    f"the model; it reports {', '.join(sorted(logs))}"
                )
            if spec.tuner.objective not in logs:
                raise InvalidSearch(
                    f'spec.tuner.objective.name: "{spec.tuner.objective}" is not produced by '
                    f"the model; it reports {', '.join(sorted(logs))}"
                )
            for name, value in logs.items():
                history.setdefault(name, []).append(value)
            if board is not None:
                board.epoch(epoch, logs)
            log.info(
                "trial %s exec %d epoch %d/%d: %s",
                tid,
                execution,
                epoch + 1,
                epochs,
                " ".join(f"{k}={v:.4f}" for k, v in sorted(logs.items())),
            )
            best = self._best_entry(tid, logs[spec.tuner.objective], epoch)
            epoch, step = epoch + 1, 0
            # Progress says where a resume would start: (next epoch, step 0).
            ctx.reporter.update(epoch=epoch, step=0)
            # The stream's position as it is once the epoch is over (before end_epoch).
            position = None if stream is None else stream.state(callback.trained, epoch_end=True)
            self._checkpoint(store, model, epoch, 0, history, best, position)
            if stream is not None:
                stream.end_epoch(callback.trained)
            ctx.train_seconds += time.monotonic() - t_fit
            if preemption.requested():  # SIGTERM arrived during validation
                self._flush()
                raise preemption.Preempted()
        if board is not None:
            board.end()
        self._flush()  # the last checkpoint and best state are durable before done.json
        if ctx.write:
            record: dict[str, Any] = {"history": history, "initialEpoch": initial_epoch}
            if stream is not None:
                # The run's count first: a kill before done.json retrains from the
                # epoch-end checkpoint, whose position restores the count anyway.
                iterations.record(ctx.root, stream.dataset, key, stream.iterations)
                record["datasetIterations"] = stream.iterations
            write_atomic(done, json.dumps(record).encode())
            store.remove()
        return _history(history, initial_epoch)

    # -- checkpoints ----------------------------------------------------------------
    def _checkpoint(
        self,
        store: CheckpointStore,
        model: Any,
        epoch: int,
        step: int,
        history: dict[str, Any],
        best: tuple[tuple[CheckpointStore, dict[str, Any]], ...] = (),
        position: dict[str, Any] | None = None,
    ) -> None:
        """Copy the state to the host and hand it to the background writer (after the
        previous save, if still in flight, is done)."""
        if not self.ctx.write:
            return
        t0 = time.monotonic()
        meta: dict[str, Any] = {
            "epoch": epoch,
            "step": step,
            "history": {k: list(v) for k, v in history.items()},
        }
        if position is not None:  # a tf.data input's position (tfdata.Stream.state)
            meta["datasetStream"] = position
        if self._board is not None:
            meta[TENSORBOARD_DIR] = self._board.sizes()
        self.ctx.writer.submit(store, model_state(model), meta, best)
        blocked = time.monotonic() - t0
        self.ctx.checkpoint_seconds += blocked
        self.ctx.cadence.blocked(blocked)
        self.ctx.checkpoints += 1

    def _flush(self) -> None:
        """Wait for the save in flight (a SIGTERM, an execution's end)."""
        t0 = time.monotonic()
        self.ctx.writer.wait()
        self.ctx.checkpoint_seconds += time.monotonic() - t0

    def _best_entry(
        self, tid: str, value: float, epoch: int
    ) -> tuple[tuple[CheckpointStore, dict[str, Any]], ...]:
        """The best store and its meta if this epoch is the trial's best so far: the
        epoch-end checkpoint that follows is then linked into it."""
        if not self.ctx.write or math.isnan(value):
            return ()
        store = self._best_store(tid)
        if tid not in self._best_values:
            meta = store.latest_meta()
            self._best_values[tid] = None if meta is None else meta["value"]
        previous = self._best_values[tid]
        better = previous is None or (
            value > previous if self.ctx.spec.tuner.direction == "max" else value < previous
        )
        if not better:
            return ()
        self._best_values[tid] = value
        return ((store, {"value": value, "epoch": epoch}),)

    # -- best model ---------------------------------------------------------------------
    def load_model(self, trial: Any) -> Any:
        """The trial's best-epoch model, built and restored inside the strategy scope."""
        self.ctx.writer.wait()
        model = self._build(trial.hyperparameters, self._seed(trial.trial_id, 0))
        best = self._best_store(trial.trial_id).latest()
        if best is None:
            raise InvalidSearch(f"no saved state for trial {trial.trial_id}")
        with self.ctx.strategy.scope():
            restore_state(model, best[0], ("model", "optimizer"))
        return model

    def on_trial_begin(self, trial: Any) -> None:
        if preemption.requested():  # between trials: the oracle state is already durable
            raise preemption.Preempted()
        super().on_trial_begin(trial)  # type: ignore[misc]
        # The operator learns which trial runs before the trial builds its model: a model
        # whose hyperparameters run the trainer out of memory as it is built or trained
        # is then recorded as this trial (status.oomTrials), not as the previous one.
        self.ctx.reporter.update(force=True, trial_id=str(trial.trial_id))  # type: ignore[attr-defined]
        self.ctx.reporter.flush()  # type: ignore[attr-defined]

    def on_trial_end(self, trial: Any) -> None:
        super().on_trial_end(trial)  # type: ignore[misc]
        from .results import search_progress

        # a trial group's client has no trials: then only the planned count
        self.ctx.reporter.update(force=True, **search_progress(self.oracle))  # type: ignore[attr-defined]


def tuner_file() -> str:
    """keras-tuner's tuner file name in the project: `<tuner id>.json` (it reloads a
    project only if that file exists; the oracle's is `chief.json`)."""
    return f"{os.environ.get(ENV_TUNER_ID) or 'tuner0'}.json"


class _StepCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Per step: progress, periodic checkpoints, SIGTERM. Per epoch start: restore the
    metric accumulators of a mid-epoch checkpoint (fit resets them before calling us)."""

    def __init__(
        self,
        tuner: ResumableMixin,
        store: CheckpointStore,
        epoch: int,
        start_step: int,
        steps: int | None,
        history: dict[str, Any],
        pending_metrics: dict[str, np.ndarray] | None,
        stream: tfdata.Stream | None = None,
    ) -> None:
        super().__init__()
        self.tuner = tuner
        self.store = store
        self.epoch = epoch
        self.start_step = start_step
        self.steps = steps
        self.history = history
        self.pending_metrics = pending_metrics
        self.stream = stream
        self.trained = start_step  # the epoch's batches trained so far
        self.skipped = end_of_data.SkippedStep()  # with `stream`: Keras's last step
        self.since_steps = 0
        self.since_time = time.monotonic()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.stream is not None:
            self.skipped.begin(self.model)
        if self.pending_metrics is not None:
            with self.tuner.ctx.strategy.scope():
                restore_metrics(self.model, self.pending_metrics)
            self.pending_metrics = None

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        ctx = self.tuner.ctx
        step = self.start_step + batch + 1
        self.trained = step
        ctx.steps += 1
        ctx.reporter.step(self.epoch, step)
        self.since_steps += 1
        if self.steps is not None and step >= self.steps:
            # The epoch's last step: validation and the epoch-end checkpoint follow at
            # once (and handle a pending SIGTERM), so a checkpoint is never "all batches
            # done, not validated" - a state that would have no batches left to resume.
            return
        if self.stream is not None and self.stream.ends_at(step):
            # The data's last batch, the same: stop Keras rather than let it run its
            # failing end-of-data step, and apply that step's updates (end_of_data.py).
            self.skipped.stop(batch + 1)
            return
        if preemption.requested():
            self._save(step)
            self.tuner._flush()
            log.warning("preempted: checkpoint at epoch %d step %d written", self.epoch, step)
            raise preemption.Preempted()
        if ctx.cadence.due(self.since_steps, time.monotonic() - self.since_time):
            self._save(step)
            self.since_steps = 0
            self.since_time = time.monotonic()

    def _save(self, step: int) -> None:
        position = None if self.stream is None else self.stream.state(step)
        self.tuner._checkpoint(self.store, self.model, self.epoch, step, self.history, (), position)


def _history(history: dict[str, list[float]], initial_epoch: int) -> Any:
    h = keras.callbacks.History()
    h.history = {k: list(v) for k, v in history.items()}
    h.epoch = list(range(initial_epoch, initial_epoch + len(next(iter(history.values()), []))))
    return h


class Hyperband(ResumableMixin, keras_tuner.Hyperband):  # type: ignore[misc]
    pass


class RandomSearch(ResumableMixin, keras_tuner.RandomSearch):  # type: ignore[misc]
    pass


class BayesianOptimization(ResumableMixin, keras_tuner.BayesianOptimization):  # type: ignore[misc]
    pass


class GridSearch(ResumableMixin, keras_tuner.GridSearch):  # type: ignore[misc]
    pass


def create(ctx: Context, hypermodel: Any) -> Any:
    """The tuner for `ctx.spec`, its project under <dir>/tuner/search."""
    t = ctx.spec.tuner
    objective = keras_tuner.Objective(t.objective, direction=t.direction)
    common: dict[str, Any] = {
        "hypermodel": hypermodel,
        "objective": objective,
        "seed": t.seed,
        "directory": str(ctx.root / TUNER_DIR),
        "project_name": "search",
        "overwrite": False,
        "distribution_strategy": ctx.strategy,
        "executions_per_trial": t.executions_per_trial,
        "context": ctx,
    }
    if t.algorithm == "Hyperband":
        return Hyperband(
            max_epochs=t.max_epochs,
            factor=t.factor,
            hyperband_iterations=t.hyperband_iterations,
            **common,
        )
    cls = {"RandomSearch": RandomSearch, "BayesianOptimization": BayesianOptimization}.get(
        t.algorithm, GridSearch
    )
    return cls(max_trials=t.max_trials, **common)
