"""`Model.fit`, checkpointed and resumed at the exact step, with the script's arguments.

In exec mode every `fit` (in a trial or after the search) gets a directory of its own
(`Runtime.next_fit`) and runs as an outer loop of one Keras `fit` per epoch that all
share one `CallbackList`: the script's callbacks see one `on_train_begin`, every epoch
and batch with its true index, and one `on_train_end`, exactly as in a single `fit`.

Why per epoch: the data position must be a pure function of (epoch, step). Each input
kind (data/inputs/: arrays, tf.data, PyDataset, generators) says which batches train from
(epoch, step) on and puts itself back where a checkpoint left it, so a resumed fit sees
the same batches in the same order as an uninterrupted one.

A checkpoint (the checkpoint/ store's format) holds the model, optimizer and metric-accumulator
variables, every callback's state (callback_state.py), the position, the history so
far and the fit's fingerprint. It is written every `intervalSteps` steps and/or
`intervalSeconds`, at every epoch end, on SIGTERM (then `Preempted`, exit 75), and
once more after `on_train_end` (`done`: callbacks such as EarlyStopping may restore
weights there). A resumed fit restores the model and optimizer before training, the
callbacks' state after their `on_train_begin`, the metric accumulators of a mid-epoch
checkpoint after Keras resets them, and skips the batches already trained. A fit that
was done returns its saved history and final weights without training.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from typing import Any

import keras
import keras_tuner
import numpy as np

from .. import preemption, seeds
from ..checkpoint import (
    CheckpointMismatch,
    CheckpointStore,
    Layout,
    model_state,
    restore_metrics,
    restore_state,
    volume_errors,
)
from ..data import inputs
from ..data.inputs import FitInput
from ..data.inputs.arrays import digest, is_arrays, to_numpy
from ..data.inputs.base import ResumeMismatch, UnsupportedFit
from ..data.inputs.validation import validation_input
from ..strategy import same_on_every_worker
from . import callback_state, runtime, tensorboard

log = logging.getLogger(__name__)

_original_fit: Any = None


class InvalidSearch(keras_tuner.errors.FatalError):  # type: ignore[misc]
    """A spec or hypermodel problem found while training (exit 2); the message names
    the field."""


class WorkersDisagree(keras_tuner.errors.FatalError):  # type: ignore[misc]
    """The workers of a MultiWorkerMirroredStrategy group are not at the same fit."""


def route(original: Any) -> Any:
    """`original` (Keras's `TensorFlowTrainer.fit`) routed through `ResumableFit` while a
    Runtime is installed; each epoch's Keras fit then calls `original` itself."""
    global _original_fit
    signature = inspect.signature(original)

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        rt = runtime.current()
        if rt is None:
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        arguments.pop("self")
        # A fit restored as done trains nothing: no fit draws from the script's streams.
        with seeds.isolated():
            return ResumableFit(rt, self, arguments).run()

    _original_fit = original
    return fit


class ResumableFit:
    def __init__(self, rt: runtime.Runtime, model: Any, args: dict[str, Any]) -> None:
        self.rt = rt
        self.model = model
        self.args = args
        self.id = rt.next_fit()
        self.label, self.dir = self.id.label, self.id.dir
        self.store = CheckpointStore(self.dir, keep=rt.checkpoint.keep)
        self.history: dict[str, list[float]] = {}
        self.epochs_done: list[int] = []
        self.epoch = 0
        self.last_logs: dict[str, Any] | None = None
        self.pending_metrics: dict[str, np.ndarray] | None = None
        self.saved_callbacks: tuple[list[dict[str, Any]], dict[str, np.ndarray]] | None = None
        self.seed = seeds.derive(self.label)
        if not same_on_every_worker(rt.strategy, self.seed):
            raise WorkersDisagree(
                f"{self.label}: the workers of this group are not at the same fit (its "
                "seed differs between them); stopped rather than train their replicas on "
                "different batches"
            )
        self.layout = Layout.of(model)  # replicas now; a checkpoint's may differ
        self.written_by: Layout | None = None  # the restored checkpoint's
        self.epoch_steps = 0  # batches of the current epoch trained so far
        self.resumed_logs: dict[str, Any] | None = None  # see _Checkpointer.on_epoch_begin
        self.in_epoch = False

    # -- inputs -----------------------------------------------------------------------
    def _prepare_inputs(self) -> None:
        self.input: FitInput = inputs.of(
            inputs.FitContext(
                args=self.args,
                script=self.rt.script,
                label=self.label,
                dir=self.dir,
                root=self.rt.root,
                seed=self.seed,
                known_digests=self.rt.known_digests,
            )
        )
        self.steps = self.input.steps
        self.validation_data = self.input.validation_data
        self.validation_input = validation_input(
            self.validation_data, self.args, self.input.batch_size, self.model
        )

    def _fingerprint(self) -> dict[str, Any]:
        a = self.args
        val = self.validation_data
        known = self.rt.known_digests
        if id(val) in known:  # a front end's own digest (spec mode's tf.data loader)
            val_id: Any = known[id(val)][1][:16]
        elif val is not None and is_arrays(val):
            val_id = digest(to_numpy(val), known)
        else:
            val_id = None if val is None else type(val).__name__
        return {
            "data": self.input.fingerprint(),
            "validation": val_id,
            "arguments": {
                "batch_size": a["batch_size"],
                "epochs": a["epochs"],
                "shuffle": a["shuffle"],
                "steps_per_epoch": a["steps_per_epoch"],
                "initial_epoch": a["initial_epoch"],
                "validation_freq": a["validation_freq"],
                "validation_split": a["validation_split"],
                "class_weight": None
                if a["class_weight"] is None
                else {str(k): float(v) for k, v in dict(a["class_weight"]).items()},
            },
            "callbacks": [type(cb).__name__ for cb in self.user_callbacks],
        }

    # -- state ------------------------------------------------------------------------
    def _prebuild(self) -> None:
        """Create every model, optimizer and metric variable now (Keras creates them at
        the first step) so a checkpoint can be restored before training."""
        model = self.model
        with model.distribute_strategy.scope():
            batch = self.input.build_batch()
            if batch is not None:
                model._symbolic_build(data_batch=batch)
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)

    def _restore(self, arrays: dict[str, np.ndarray], groups: tuple[str, ...]) -> None:
        try:
            with self.model.distribute_strategy.scope():
                restore_state(self.model, arrays, groups, self.written_by)
        except CheckpointMismatch as exc:
            raise ResumeMismatch(
                f"{self.rt.script}: {self.label}: the model differs from the one in its "
                f"checkpoint ({exc}); did the script change since the search started?"
            ) from exc

    def save(self, epoch: int, step: int, done: bool = False) -> None:
        if not self.rt.write:
            return
        t0 = time.monotonic()
        arrays = model_state(self.model)
        described, cb_arrays = callback_state.capture(self.user_callbacks)
        arrays.update(cb_arrays)
        meta = {
            "label": self.label,
            "epoch": epoch,
            "step": step,
            "done": done,
            "stopped": bool(self.model.stop_training),
            "history": self.history,
            "epochsDone": self.epochs_done,
            "lastLogs": self.last_logs,
            "callbacks": described,
            "fingerprint": self.fingerprint,
            "tensorboard": self.logs.sizes(),
            **self.layout.meta(),
            # epoch_end: the epoch-end save, before the input's end_epoch
            **self.input.state(
                self.epoch_steps if self.in_epoch else 0, self.in_epoch and step == 0
            ),
        }
        with volume_errors(self.rt.root):
            self.rt.writer.submit(self.store, arrays, meta)
            self.rt.checkpoints += 1
            blocked = time.monotonic() - t0
            self.rt.checkpoint_seconds += blocked
            self.rt.cadence.blocked(blocked)
            if done:  # the fit's result is durable before the script goes on
                self.rt.flush_checkpoints()
                self.input.done()

    def _history_object(self) -> Any:
        history = self.callbacks._history if hasattr(self, "callbacks") else None
        if history is None:
            history = keras.callbacks.History()
            history.set_model(self.model)
        history.history = {k: list(v) for k, v in self.history.items()}
        history.epoch = list(self.epochs_done)
        return history

    # -- the fit ----------------------------------------------------------------------
    def run(self) -> Any:
        a = self.args
        callbacks = a["callbacks"]
        if isinstance(callbacks, keras.callbacks.CallbackList):
            callbacks = callbacks.callbacks
        self.user_callbacks = list(callbacks or [])
        self._prepare_inputs()
        self.fingerprint = json.loads(json.dumps(self._fingerprint()))
        epochs, start_epoch, start_step = int(a["epochs"]), int(a["initial_epoch"]), 0
        found = self.store.latest()
        meta: dict[str, Any] = {}
        if found is not None:
            arrays, meta, path = found
            self._check_fingerprint(meta)
            self._check_layout(meta)
            start_epoch, start_step = int(meta["epoch"]), int(meta["step"])
            self.history = {k: list(v) for k, v in meta["history"].items()}
            self.epochs_done = list(meta["epochsDone"])
            self.last_logs = meta.get("lastLogs")
        self.input.resume(meta)
        self._prebuild()
        if found is not None:
            self._restore_found(arrays, meta, path.name)
            if meta.get("done"):
                return self._history_object()
        self.logs = tensorboard.FitLogs(self.rt, self.dir, self.user_callbacks)
        if found is not None:
            self.logs.resume(meta.get("tensorboard"))
        else:
            self.logs.start()
        t0 = time.monotonic()
        try:
            self._train(epochs, start_epoch, start_step, stopped=bool(meta.get("stopped")))
        finally:
            self.rt.train_seconds += time.monotonic() - t0
        return self._history_object()

    def _restore_found(
        self, arrays: dict[str, np.ndarray], meta: dict[str, Any], name: str
    ) -> None:
        """Model and optimizer from the checkpoint now; callbacks' state and a mid-epoch
        checkpoint's metric accumulators once Keras has reset them."""
        t0 = time.monotonic()
        self._restore(arrays, ("model", "optimizer"))
        epoch, step = int(meta["epoch"]), int(meta["step"])
        log.info(
            "%s: restored %s at epoch %d step %d in %.3fs%s",
            self.label,
            name,
            epoch,
            step,
            time.monotonic() - t0,
            " (done)" if meta.get("done") else "",
        )
        self.rt.reporter.metrics.restores.inc()
        self.rt.reporter.update(
            force=True,
            resumed_from_step=step,
            resumed_from_epoch=epoch,
            restores=self.rt.reporter.progress.restores + 1,
        )
        if not meta.get("done"):
            self.saved_callbacks = (meta["callbacks"], arrays)
            if step:
                self.pending_metrics = arrays

    def _check_layout(self, meta: dict[str, Any]) -> None:
        """A checkpoint written by another number of replicas resumes with the same
        global batch (split over the replicas there are now), when they divide it."""
        self.written_by = Layout.from_meta(meta)
        then, now = self.written_by, self.layout
        if then is None or then.replicas == now.replicas or meta.get("done"):
            return  # a done fit trains no more: its replicas do not matter
        batch = self.input.global_batch()
        if batch is not None and batch % now.replicas:
            divisors = [n for n in range(1, batch + 1) if batch % n == 0]
            raise UnsupportedFit(
                f"{self.rt.script}: {self.label}: its checkpoint was written by "
                f"{then.replicas} replicas and this process has {now.replicas}: the global "
                f"batch of {batch} does not split evenly over {now.replicas}; resume on a "
                f"replica count that divides it ({', '.join(map(str, divisors))})"
            )
        log.warning(
            "%s: resuming a checkpoint of %d replicas on %d: the same global batch%s and "
            "data order; not bit-identical to an uninterrupted run (the reduction order "
            "changes; docs/design/trainer.md, elastic resume)",
            self.label,
            then.replicas,
            now.replicas,
            f" ({batch}, {batch // now.replicas} per replica)" if batch else "",
        )

    def _check_fingerprint(self, meta: dict[str, Any]) -> None:
        saved = meta.get("fingerprint") or {}
        for part in ("data", "validation", "arguments", "callbacks"):
            if saved.get(part) != self.fingerprint[part]:
                what = {
                    "data": "its training data",
                    "validation": "its validation data",
                    "arguments": "its arguments",
                    "callbacks": "its callbacks",
                }[part]
                detail = ""
                if part == "arguments":
                    changed = [
                        k
                        for k, v in self.fingerprint[part].items()
                        if (saved.get(part) or {}).get(k) != v
                    ]
                    detail = f" ({', '.join(changed)})"
                raise ResumeMismatch(
                    f"{self.rt.script}: {self.label}: {what}{detail} changed since its "
                    f"checkpoint in {self.dir}; a resume must see the same data and "
                    "arguments (make the data deterministic, or start over with an "
                    "empty checkpoint directory)"
                )

    def _train(self, epochs: int, start_epoch: int, start_step: int, stopped: bool) -> None:
        a = self.args
        model = self.model
        self.mid_epoch = self.input.mid_epoch
        checkpointer = _Checkpointer(self)
        self.callbacks = _FitCallbacks(
            [*self.user_callbacks, checkpointer],
            fit=self,
            model=model,
            verbose=a["verbose"],
            epochs=epochs,
            steps=self.steps or None,
        )
        self.logs.callbacks_ready()
        optimizer = model.optimizer
        finalize = getattr(optimizer, "finalize_variable_values", None)
        if finalize is not None:
            # Keras calls this at the end of every fit (EMA weights); once, at the end.
            optimizer.finalize_variable_values = lambda *_: None
        self.rt.reporter.update(
            force=True,
            trial_id=self.id.progress_id,
            execution=self.id.ordinal,
            epoch=start_epoch,
            step=start_step,
        )
        try:
            self.callbacks.on_train_begin()
            for epoch in range(start_epoch, epochs):
                if stopped:
                    break
                self._fit_epoch(epoch, start_step if epoch == start_epoch else 0)
                if model.stop_training:
                    break
        finally:
            if finalize is not None:
                del optimizer.finalize_variable_values
            if "_maybe_symbolic_build" in vars(model):
                del model._maybe_symbolic_build
        if epochs > 0 and finalize is not None:
            finalize(model.trainable_weights)
        self.callbacks.finish(self.last_logs)
        self.save(self.epoch_position(), 0, done=True)

    def _fit_epoch(self, epoch: int, start: int) -> None:
        """One Keras fit over the epoch's batches from `start` on, with validation."""
        a, model = self.args, self.model
        self.callbacks.offset = start
        self.epoch_steps = start
        given = {"y": None, "sample_weight": None, "batch_size": None}
        given.update(self.input.epoch(epoch, start))
        self.in_epoch = True
        if self.input.no_peek:  # built already (_prebuild)
            model._maybe_symbolic_build = lambda *_, **__: None
        _original_fit(
            model,
            **given,
            epochs=epoch + 1,
            initial_epoch=epoch,
            verbose=a["verbose"],
            callbacks=self.callbacks,
            validation_data=self.validation_input,
            class_weight=a["class_weight"],
            validation_steps=a["validation_steps"],
            validation_batch_size=None
            if self.validation_input is not self.validation_data
            else a["validation_batch_size"],
            validation_freq=a["validation_freq"],
        )
        self.in_epoch = False
        self.input.end_epoch(self.epoch_steps)

    def epoch_position(self) -> int:
        return (self.epochs_done[-1] + 1) if self.epochs_done else int(self.args["initial_epoch"])


class _FitCallbacks(keras.callbacks.CallbackList):  # type: ignore[misc]
    """One CallbackList across the per-epoch Keras fits: `on_train_begin` and
    `on_train_end` reach the callbacks once, batch indices are the true ones."""

    def __init__(self, callbacks: list[Any], fit: ResumableFit, model: Any, **params: Any) -> None:
        verbose = params.get("verbose", "auto")
        super().__init__(
            callbacks, add_history=True, add_progbar=verbose != 0, model=model, **params
        )
        self.fit = fit
        self.offset = 0
        self.started = False

    def on_train_begin(self, logs: Any = None) -> None:
        if self.started:
            return
        self.started = True
        super().on_train_begin(logs)
        fit = self.fit
        history = self._history
        if history is not None:
            history.history = {k: list(v) for k, v in fit.history.items()}
            history.epoch = list(fit.epochs_done)
        if fit.saved_callbacks is not None:
            described, arrays = fit.saved_callbacks
            try:
                callback_state.restore(fit.user_callbacks, described, arrays)
            except callback_state.CallbackMismatch as exc:
                raise ResumeMismatch(f"{fit.rt.script}: {fit.label}: {exc}") from exc

    def on_train_end(self, logs: Any = None) -> None:
        pass  # see finish()

    def finish(self, logs: Any) -> None:
        super().on_train_end(logs)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        super().on_train_batch_begin(batch + self.offset, logs)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.fit.resumed_logs = None  # a batch ran: Keras reports the epoch's metrics
        super().on_train_batch_end(batch + self.offset, logs)

    def _unstop(self) -> None:
        """The trainer's stop at the data's end is not the user's: from validation on,
        `model.stop_training` is what the script's callbacks set."""
        self.fit.input.unstop(self.fit.model)

    def on_test_begin(self, logs: Any = None) -> None:
        self._unstop()
        super().on_test_begin(logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._unstop()
        resumed, self.fit.resumed_logs = self.fit.resumed_logs, None
        if resumed is not None:  # Keras reports no training metrics for an empty epoch
            logs = {**resumed, **(logs or {})}
        super().on_epoch_end(epoch, logs)


class _Checkpointer(keras.callbacks.Callback):  # type: ignore[misc]
    """Last of the script's callbacks: progress, periodic and epoch-end checkpoints,
    SIGTERM. Runs after the others so their state includes the step or epoch."""

    def __init__(self, fit: ResumableFit) -> None:
        super().__init__()
        self.fit = fit
        self.since_steps = 0
        self.since_time = time.monotonic()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        fit = self.fit
        fit.epoch = epoch
        fit.input.on_epoch_begin(self.model)
        if fit.pending_metrics is not None:
            with self.model.distribute_strategy.scope():
                restore_metrics(self.model, fit.pending_metrics, fit.written_by)
            fit.pending_metrics = None
            # The epoch's training metrics so far: what it reports if no batch is left
            # (resumed after its last batch, its length not known when saved).
            fit.resumed_logs = dict(self.model.get_metrics_result())

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        fit, rt = self.fit, self.fit.rt
        step = batch + 1
        fit.epoch_steps = step
        ended = fit.input.ends_at(step, fit.callbacks.offset, self.model)
        rt.steps += 1
        rt.reporter.step(fit.epoch, step)
        self.since_steps += 1
        if ended or (fit.steps and step >= fit.steps):
            return  # validation and the epoch-end checkpoint follow at once
        if preemption.requested():
            if fit.mid_epoch:
                fit.save(fit.epoch, step)
            rt.flush_checkpoints()
            if fit.mid_epoch:
                log.warning(
                    "preempted: %s checkpointed at epoch %d step %d", fit.label, fit.epoch, step
                )
            raise preemption.Preempted()
        if not fit.mid_epoch:
            return
        if rt.cadence.due(self.since_steps, time.monotonic() - self.since_time):
            fit.save(fit.epoch, step)
            self.since_steps = 0
            self.since_time = time.monotonic()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        fit = self.fit
        logs = {k: float(v) for k, v in (logs or {}).items()}
        for key, value in logs.items():
            fit.history.setdefault(key, []).append(value)
        fit.epochs_done.append(epoch)
        fit.last_logs = logs
        log.info(
            "%s epoch %d: %s",
            fit.label,
            epoch + 1,
            " ".join(f"{k}={v:.4f}" for k, v in sorted(logs.items())),
        )
        fit.rt.reporter.update(epoch=epoch + 1, step=0)
        fit.save(epoch + 1, 0)
        self.since_steps = 0
        self.since_time = time.monotonic()
        if preemption.requested():
            fit.rt.flush_checkpoints()
            raise preemption.Preempted()
