"""`Model.fit`, checkpointed and resumed at the exact step, with the script's arguments.

In exec mode every `fit` (in a trial or after the search) gets a directory of its own
(`Runtime.next_fit`) and runs as an outer loop of one Keras `fit` per epoch that all
share one `CallbackList`: the script's callbacks see one `on_train_begin`, every epoch
and batch with its true index, and one `on_train_end`, exactly as in a single `fit`.

Why per epoch: the data position must be a pure function of (epoch, step). For numpy
inputs (arrays, or lists/tuples/dicts of arrays: several inputs and outputs) the
trainer orders each epoch itself - `shuffle=True` is a permutation seeded by the fit's
identity and the epoch, `"batch"` permutes whole batches, `False` keeps the order - and
hands Keras the epoch's remaining batches, gathered one at a time from the arrays
(batches.py: no per-epoch copy of the training set); batches are the ones Keras makes
(`batch_size`, default 32, the last one partial). `validation_split` is Keras's own
split (the tail, before shuffling). `steps_per_epoch` reads the epochs as a stream over
passes through the data, as Keras does. So a resumed fit sees the same batches in the
same order as an uninterrupted one.

A checkpoint (the checkpoint/ store's format) holds the model, optimizer and metric-accumulator
variables, every callback's state (callback_state.py), the position, the history so
far and the fit's fingerprint. It is written every `intervalSteps` steps and/or
`intervalSeconds`, at every epoch end, on SIGTERM (then `Preempted`, exit 75), and
once more after `on_train_end` (`done`: callbacks such as EarlyStopping may restore
weights there). A resumed fit restores the model and optimizer before training, the
callbacks' state after their `on_train_begin`, the metric accumulators of a mid-epoch
checkpoint after Keras resets them, and skips the batches already trained. A fit that
was done returns its saved history and final weights without training.

Other inputs: a `tf.data.Dataset` is iterated by the trainer as Keras would and
resumed mid-epoch, replaying the iterations made before (tfdata.py, iterations.py); a
`PyDataset` of known length is resumed at the checkpointed batch (pydataset.py);
generators and the other PyDatasets are resumed at the start of the interrupted epoch
(checkpoints only at epoch ends), with a warning saying so.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import math
import time
from typing import Any

import keras
import keras_tuner
import numpy as np

from .. import batches, end_of_data, iterations, multiworker, preemption, seeds, tfdata
from ..checkpoint import (
    CheckpointMismatch,
    CheckpointStore,
    model_state,
    restore_metrics,
    restore_state,
    volume_errors,
)
from ..fingerprint import digest_arrays
from ..shards import Sharded
from . import callback_state, pydataset, runtime, tensorboard

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 32  # Keras's, for array inputs without batch_size

_original_fit: Any = None


class ResumeMismatch(keras_tuner.errors.FatalError):  # type: ignore[misc]
    """The script, its data or its model differ from the checkpoint being resumed.
    A FatalError, so keras-tuner re-raises it instead of recording a failed trial."""


class UnsupportedFit(keras_tuner.errors.FatalError):  # type: ignore[misc]
    """A fit argument combination script mode cannot resume exactly."""


class InvalidSearch(keras_tuner.errors.FatalError):  # type: ignore[misc]
    """A spec or hypermodel problem found while training (exit 2); the message names
    the field."""


class WorkersDisagree(keras_tuner.errors.FatalError):  # type: ignore[misc]
    """The workers of a MultiWorkerMirroredStrategy group are not at the same fit."""


def install() -> None:
    """Route `keras.Model.fit` through `ResumableFit` while a Runtime is installed."""
    global _original_fit
    if _original_fit is not None:
        return
    iterations.install()
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    original = TensorFlowTrainer.fit
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
    TensorFlowTrainer.fit = fit


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or (
        hasattr(value, "__array__") and hasattr(value, "shape") and hasattr(value, "dtype")
    )


def _arrays(structure: Any) -> bool:
    """True for None, an array, or a list/tuple/dict of arrays (Keras's structures)."""
    if structure is None:
        return True
    leaves = keras.tree.flatten(structure)
    return bool(leaves) and all(_is_array(leaf) for leaf in leaves)


def _to_numpy(structure: Any) -> Any:
    """Arrays as numpy arrays; an ndarray (a memory-mapped one too) and spec mode's
    shards stay as they are (np.asarray would read shards into one copy)."""
    if structure is None:
        return None
    return keras.tree.map_structure(
        lambda v: v if isinstance(v, np.ndarray | Sharded) else np.asarray(v), structure
    )


def _digest(structure: Any, known: dict[int, tuple[Any, str]]) -> str | None:
    if structure is None:
        return None
    leaves = keras.tree.flatten(structure)
    if leaves and all(id(leaf) in known for leaf in leaves):
        text = " ".join(known[id(leaf)][1] for leaf in leaves)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
    return digest_arrays(*leaves)[:16]


# The kinds whose iterations (tf.data) or epochs (PyDataset) are counted (iterations.py).
_COUNTED = ("tf.data", "pydataset")


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
        if not multiworker.same_on_every_worker(rt.strategy, self.seed):
            raise WorkersDisagree(
                f"{self.label}: the workers of this group are not at the same fit (its "
                "seed differs between them); stopped rather than train their replicas on "
                "different batches"
            )
        self.training: batches.Gathered | None = None  # array inputs: one pipeline per fit
        self.stream: tfdata.Stream | None = None  # tf.data inputs (tfdata.py)
        self.skipped = end_of_data.SkippedStep()  # with `stream`: Keras's last step
        self.end_stop = False  # the trainer stopped Keras at the data's end (not the user)
        self.epoch_steps = 0  # batches of the current epoch trained so far
        self.resumed_logs: dict[str, Any] | None = None  # see _Checkpointer.on_epoch_begin
        self.in_epoch = False

    # -- inputs -----------------------------------------------------------------------
    def _prepare_inputs(self) -> None:
        a = self.args
        x, y, sw = a["x"], a["y"], a["sample_weight"]
        self.array_input = _arrays(x) and x is not None and _arrays(y) and _arrays(sw)
        self.validation_data = a["validation_data"]
        if self.array_input:
            x, y, sw = _to_numpy(x), _to_numpy(y), _to_numpy(sw)
            if a["validation_split"] and self.validation_data is None:
                from keras.src.trainers.data_adapters import array_slicing

                (x, y, sw), self.validation_data = array_slicing.train_validation_split(
                    (x, y, sw), validation_split=a["validation_split"]
                )
                x, y, sw = _to_numpy(x), _to_numpy(y), _to_numpy(sw)
            sizes = {len(leaf) for leaf in keras.tree.flatten([x, y, sw]) if leaf is not None}
            if len(sizes) != 1:
                raise UnsupportedFit(
                    f"{self.rt.script}: fit(): x, y and sample_weight have different "
                    f"numbers of samples ({sorted(sizes)})"
                )
            self.samples = sizes.pop()
            self.batch_size = int(a["batch_size"] or DEFAULT_BATCH_SIZE)
            self.batches_per_pass = math.ceil(self.samples / self.batch_size)
            self.steps = int(a["steps_per_epoch"] or self.batches_per_pass)
            if self.steps != self.batches_per_pass and self.samples % self.batch_size:
                raise UnsupportedFit(
                    f"{self.rt.script}: fit(steps_per_epoch={self.steps}) over "
                    f"{self.samples} samples in batches of {self.batch_size} would put a "
                    "partial batch inside an epoch; script mode resumes such a fit only "
                    "when the sample count is a multiple of batch_size (or without "
                    "steps_per_epoch)"
                )
        else:
            if a["validation_split"] and self.validation_data is None:
                raise UnsupportedFit(
                    f"{self.rt.script}: fit(validation_split=...) needs array inputs "
                    "(as in Keras); pass validation_data"
                )
            self.steps = self._dataset_steps(x)
        self.x, self.y, self.sample_weight = x, y, sw
        self.validation_input = self._validation_input()

    def _validation_input(self) -> Any:
        """Array validation data as gathered batches (batches.py), which Keras would
        otherwise convert again at every epoch's fit; other kinds as they are."""
        val = self.validation_data
        given = [part for part in val if part is not None] if isinstance(val, tuple | list) else []
        if not given or not _arrays(given):  # (x, y, None): validation_split's, arrays too
            return tfdata.data_sharded(val, self.model.distribute_strategy)
        a = self.args
        parts = [_to_numpy(p) for p in keras.utils.unpack_x_y_sample_weight(tuple(val))]
        size = len(keras.tree.flatten(parts[0])[0])
        bs = a["validation_batch_size"] or (
            self.batch_size if self.array_input else a["batch_size"]
        )
        return batches.gathered(
            batches.parts(*parts), np.arange(size), int(bs or DEFAULT_BATCH_SIZE)
        )

    def _dataset_steps(self, x: Any) -> int:
        if self.args["steps_per_epoch"]:
            return int(self.args["steps_per_epoch"])
        if isinstance(x, keras.utils.PyDataset):
            return len(x)
        try:
            import tensorflow as tf

            if isinstance(x, tf.data.Dataset):
                n = int(x.cardinality())
                if n > 0:
                    return n
        except (TypeError, ValueError):
            pass
        return 0  # unknown: the epoch ends when the input does

    def _kind(self) -> str:
        """arrays | tf.data (iterated by the trainer, exact) | pydataset (a finite
        PyDataset whose batches the trainer picks, exact) | other (generators, infinite
        PyDatasets, steps_per_epoch over a PyDataset)."""
        if self.array_input:
            return "arrays"
        import tensorflow as tf

        if pydataset.indexable(self.x):
            spe = self.args["steps_per_epoch"]
            return "pydataset" if not spe or spe == self.x.num_batches else "other"
        return "tf.data" if isinstance(self.x, tf.data.Dataset) else "other"

    def _fingerprint(self) -> dict[str, Any]:
        a = self.args
        val = self.validation_data
        known = self.rt.known_digests
        if id(val) in known:  # a front end's own digest (spec mode's tf.data loader)
            val_id: Any = known[id(val)][1][:16]
        elif val is not None and _arrays(val):
            val_id = _digest(_to_numpy(val), known)
        else:
            val_id = None if val is None else type(val).__name__
        data: Any
        if self.array_input:
            data = [_digest(p, known) for p in (self.x, self.y, self.sample_weight)]
        else:
            spec = getattr(self.x, "element_spec", None)
            data = [type(self.x).__name__, str(spec) if spec is not None else None]
        return {
            "data": data,
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

    def _pass_order(self, p: int) -> np.ndarray:
        shuffle, n, bs = self.args["shuffle"], self.samples, self.batch_size
        rng = np.random.default_rng([self.seed, p])
        if shuffle == "batch":
            blocks = rng.permutation(self.batches_per_pass)
            return np.concatenate([np.arange(b * bs, min((b + 1) * bs, n)) for b in blocks])
        if shuffle:
            return rng.permutation(n)
        return np.arange(n)

    def _epoch_indices(self, epoch: int, start: int) -> np.ndarray:
        """Sample indices of the batches [start, steps) of `epoch`, in order."""
        bs, per_pass = self.batch_size, self.batches_per_pass
        parts = []
        orders: dict[int, np.ndarray] = {}
        for g in range(epoch * self.steps + start, (epoch + 1) * self.steps):
            p, b = divmod(g, per_pass)
            if p not in orders:
                orders[p] = self._pass_order(p)
            parts.append(orders[p][b * bs : (b + 1) * bs])
        return np.concatenate(parts) if parts else np.arange(0)

    def _epoch_inputs(self, epoch: int, start: int) -> dict[str, Any]:
        kind = self._kind()
        if kind == "arrays":
            if self.training is None:
                element = batches.parts(self.x, self.y, self.sample_weight)
                self.training = batches.Gathered(element, self.batch_size)
            dataset, count = self.training.epoch(self._epoch_indices(epoch, start))
            return {
                "x": dataset,
                "y": None,
                "sample_weight": None,
                "batch_size": None,
                "steps_per_epoch": count,
            }
        if kind == "tf.data":
            assert self.stream is not None
            return {
                "x": self.stream.pipeline,
                "y": None,
                "sample_weight": None,
                "batch_size": None,
                "steps_per_epoch": self.stream.begin_epoch(start),
            }
        if kind == "pydataset":
            return self._pydataset_epoch(epoch, start)
        return {
            "x": self.x,
            "y": self.y,
            "sample_weight": self.sample_weight,
            "batch_size": self.args["batch_size"],
            "steps_per_epoch": self.args["steps_per_epoch"],
        }

    def _catch_up(self, epoch: int, one: Any) -> None:
        """Before `epoch`: call `one()` for every epoch an uninterrupted process had
        trained on `self.x` by now and this one has not, then count `epoch`."""
        target = self.ds_base + (epoch - int(self.args["initial_epoch"]))
        iterations.catch_up(self.x, target, one)
        count = iterations.counter(self.x)
        count[0] += 1
        self.ds_iterations = count[0]

    def _pydataset_epoch(self, epoch: int, start: int) -> dict[str, Any]:
        """Batches [start, steps) of `epoch` of a PyDataset (pydataset.py), after
        replaying the epoch hooks of the epochs an uninterrupted process had trained."""
        self._catch_up(epoch, lambda: pydataset.replay(self.x, 1))
        indices = pydataset.order(self.steps, self.args["shuffle"], self.seed, epoch)
        self.x.on_epoch_begin()  # on_epoch_end: after the epoch's fit (_train)
        return {
            "x": pydataset.EpochBatches(self.x, indices[start:]),
            "y": None,
            "sample_weight": None,
            "batch_size": None,
            "steps_per_epoch": None,
        }

    # -- state ------------------------------------------------------------------------
    def _prebuild(self) -> None:
        """Create every model, optimizer and metric variable now (Keras creates them at
        the first step) so a checkpoint can be restored before training."""
        model = self.model
        with model.distribute_strategy.scope():
            if self.array_input:
                bs = self.batch_size

                def head(s: Any) -> Any:
                    if s is None:
                        return None
                    return keras.tree.map_structure(lambda v: batches.as_keras(v[:bs]), s)

                model._symbolic_build(
                    data_batch=(head(self.x), head(self.y), head(self.sample_weight))
                )
            elif self._kind() == "pydataset":
                batch = self.x[0]  # a function of the index: reading it changes nothing
                batch = tuple(batch) if isinstance(batch, list | tuple) else (batch,)
                model._symbolic_build(data_batch=batch)
            elif self._kind() == "tf.data":
                # From the element spec: iterating the dataset here would advance its
                # reshuffling and change every epoch's order.
                model._symbolic_build(data_batch=tfdata.spec_batch(self.x.element_spec))
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)

    def _restore(self, arrays: dict[str, np.ndarray], groups: tuple[str, ...]) -> None:
        try:
            with self.model.distribute_strategy.scope():
                restore_state(self.model, arrays, groups)
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
            "datasetIterationsBefore": self.ds_base,
            "datasetIterations": self._iterations(),
            "tensorboard": self.logs.sizes(),
        }
        if self.stream is not None:
            at_end = self.in_epoch and step == 0  # the epoch-end save, before end_epoch
            meta["datasetStream"] = self.stream.state(
                self.epoch_steps if self.in_epoch else 0, epoch_end=at_end
            )
        with volume_errors(self.rt.root):
            self.rt.writer.submit(self.store, arrays, meta)
            self.rt.checkpoints += 1
            blocked = time.monotonic() - t0
            self.rt.checkpoint_seconds += blocked
            self.rt.cadence.blocked(blocked)
            if done:  # the fit's result is durable before the script goes on
                self.rt.flush_checkpoints()
                if self._kind() in _COUNTED:
                    iterations.record(self.rt.root, self.x, self.ds_key, self._iterations())

    def _iterations(self) -> int:
        """Iterators (tf.data) or epochs (PyDataset) made on the input so far."""
        return self.stream.iterations if self.stream is not None else self.ds_iterations

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
            start_epoch, start_step = int(meta["epoch"]), int(meta["step"])
            self.history = {k: list(v) for k, v in meta["history"].items()}
            self.epochs_done = list(meta["epochsDone"])
            self.last_logs = meta.get("lastLogs")
        self._count_input(meta)
        self._position_input(meta)
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

    def _count_input(self, meta: dict[str, Any]) -> None:
        """How often the input was iterated before this fit (tf.data, PyDataset: the
        count a resume replays, iterations.py); other kinds resume at an epoch start."""
        kind = self._kind()
        self.ds_key = (
            f"pydataset:{type(self.x).__module__}.{type(self.x).__qualname__}:{len(self.x)}"
            if kind == "pydataset"
            else f"x:{getattr(self.x, 'element_spec', None)}"
        )
        self.ds_base = 0
        self.ds_iterations = 0
        if kind in _COUNTED:
            recorded = meta.get("datasetIterationsBefore")
            self.ds_base = (
                int(recorded)
                if recorded is not None
                else iterations.before_fit(self.x, self.rt.root, self.ds_key)
            )
            self.ds_iterations = self.ds_base
        elif kind != "arrays":
            log.warning(
                "%s: input is %s: resumes at the epoch start; exact only if its order does "
                "not depend on how often it was iterated before "
                "(docs/design/trainer.md, input kinds)",
                self.label,
                type(self.x).__name__,
            )

    def _position_input(self, meta: dict[str, Any]) -> None:
        """A tf.data input's stream at the checkpoint's position (or, for a fit that was
        done, the iterations it made, for the fits after it); a done PyDataset's epochs."""
        kind = self._kind()
        made = int(meta.get("datasetIterations", self.ds_base))  # by the fit, when done
        if kind == "pydataset" and meta.get("done"):
            iterations.catch_up(self.x, made, lambda: pydataset.replay(self.x, 1))
        if kind != "tf.data":
            return
        self.stream = tfdata.Stream(self.x, self.args["steps_per_epoch"])
        if meta.get("done"):
            iterations.catch_up(self.x, made, lambda: iter(self.x))
        elif "datasetStream" in meta:
            try:
                self.stream.restore(meta["datasetStream"])
            except tfdata.ShorterThanCheckpoint as exc:
                raise ResumeMismatch(
                    f"{self.rt.script}: {self.label}: its tf.data input changed since "
                    f"its checkpoint in {self.dir}: {exc}"
                ) from exc
        else:
            self.stream.start(self.ds_base)
        if self.ds_base and self.stream.repeats and iterations.shared(self.x):
            log.warning(
                "%s: a repeated tf.data pipeline made before this trial was iterated by "
                "an earlier fit: how far TensorFlow read ahead into its next pass "
                "changes its next orders, so this fit's order is not reproducible, "
                "not even without interruptions; make the pipeline inside the trial "
                "(e.g. in HyperModel.fit) for exact results",
                self.label,
            )

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
        self.mid_epoch = self._kind() != "other"
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
        inputs = self._epoch_inputs(epoch, start)
        self.in_epoch = True
        if self._kind() in _COUNTED:
            # Built already; Keras's first-batch peek would eat an owned batch
            # (tf.data) or start an epoch (PyDataset).
            model._maybe_symbolic_build = lambda *_, **__: None
        _original_fit(
            model,
            **inputs,
            epochs=epoch + 1,
            initial_epoch=epoch,
            verbose=a["verbose"],
            callbacks=self.callbacks,
            validation_data=self.validation_input,
            # Arrays and PyDatasets: the trainer orders the batches itself.
            shuffle=a["shuffle"] if self._kind() not in ("arrays", "pydataset") else False,
            class_weight=a["class_weight"],
            validation_steps=a["validation_steps"],
            validation_batch_size=None
            if self.validation_input is not self.validation_data
            else a["validation_batch_size"],
            validation_freq=a["validation_freq"],
        )
        self.in_epoch = False
        if self.stream is not None:
            self.stream.end_epoch(self.epoch_steps)
        if self._kind() == "pydataset":
            self.x.on_epoch_end()

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
        fit = self.fit
        if fit.end_stop and fit.stream is not None:
            fit.end_stop = False
            fit.model.stop_training = fit.stream.stopped

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
        if fit.stream is not None:
            fit.skipped.begin(self.model)
        if fit.pending_metrics is not None:
            with self.model.distribute_strategy.scope():
                restore_metrics(self.model, fit.pending_metrics)
            fit.pending_metrics = None
            # The epoch's training metrics so far: what it reports if no batch is left
            # (resumed after its last batch, its length not known when saved).
            fit.resumed_logs = dict(self.model.get_metrics_result())

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        fit, rt = self.fit, self.fit.rt
        step = batch + 1
        fit.epoch_steps = step
        if fit.stream is not None:  # Keras leaves the epoch at once: no next iterator
            fit.stream.stopped = bool(self.model.stop_training)
        rt.steps += 1
        rt.reporter.step(fit.epoch, step)
        self.since_steps += 1
        if fit.steps and step >= fit.steps:
            return  # validation and the epoch-end checkpoint follow at once
        if fit.stream is not None and fit.stream.ends_at(step):
            # The data's last batch: stop here rather than let Keras run its failing
            # end-of-data step, and apply that step's updates (end_of_data.py).
            # Validation and the epoch-end checkpoint follow at once.
            if not self.model.stop_training:
                fit.skipped.stop(step - fit.callbacks.offset)
                fit.end_stop = True
            return
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
