"""A `tf.data.Dataset`, iterated by the trainer as Keras would (stream.Stream) and
resumed mid-epoch: the iterators made before are replayed, then the batches already
trained are read and dropped. The data's end inside an epoch is detected by the trainer,
which stops Keras there and applies the end-of-data step's updates (end_of_data.py)."""

from __future__ import annotations

import logging
from typing import Any

import keras

from . import end_of_data, iterations, stream
from .base import FitContext, ResumeMismatch
from .counted import CountedInput

log = logging.getLogger(__name__)


class DatasetInput(CountedInput):
    kind = "tf.data"

    def __init__(self, ctx: FitContext) -> None:
        super().__init__(ctx)
        spe = ctx.args["steps_per_epoch"]
        if spe:
            self.steps = int(spe)
        else:
            try:
                n = int(self.x.cardinality())
            except (TypeError, ValueError):
                n = 0
            self.steps = max(n, 0)  # unknown or infinite: the epoch ends with the input
        self.stream = stream.Stream(self.x, spe)
        self.skipped = end_of_data.SkippedStep()  # Keras's last step, applied by us
        self.end_stop = False  # the trainer stopped Keras at the data's end (not the user)

    def key(self) -> str:
        return f"x:{getattr(self.x, 'element_spec', None)}"

    def resume(self, meta: dict[str, Any]) -> None:
        super().resume(meta)
        ctx = self.ctx
        if meta.get("done"):  # for the fits after it
            iterations.catch_up(self.x, self.made_by_done_fit(meta), lambda: iter(self.x))
        elif "datasetStream" in meta:
            try:
                self.stream.restore(meta["datasetStream"])
            except stream.ShorterThanCheckpoint as exc:
                raise ResumeMismatch(
                    f"{ctx.script}: {ctx.label}: its tf.data input changed since "
                    f"its checkpoint in {ctx.dir}: {exc}"
                ) from exc
        else:
            self.stream.start(self.base)
        if self.base and self.stream.repeats and iterations.shared(self.x):
            log.warning(
                "%s: a repeated tf.data pipeline made before this trial was iterated by "
                "an earlier fit: how far TensorFlow read ahead into its next pass "
                "changes its next orders, so this fit's order is not reproducible, "
                "not even without interruptions; make the pipeline inside the trial "
                "(e.g. in HyperModel.fit) for exact results",
                ctx.label,
            )

    def iterations(self) -> int:
        return int(self.stream.iterations)

    def build_batch(self) -> Any:
        # From the element spec: iterating the dataset here would advance its
        # reshuffling and change every epoch's order.
        return stream.spec_batch(self.x.element_spec)

    def global_batch(self) -> int | None:
        import tensorflow as tf

        leaves = tf.nest.flatten(self.x.element_spec)
        shape = leaves[0].shape if leaves else None
        return int(shape[0]) if shape is not None and shape.rank and shape[0] else None

    def epoch(self, epoch: int, start: int) -> dict[str, Any]:
        return {
            "x": self.stream.pipeline,
            "steps_per_epoch": self.stream.begin_epoch(start),
            "shuffle": self.ctx.args["shuffle"],
        }

    def end_epoch(self, trained: int) -> None:
        self.stream.end_epoch(trained)

    def state(self, trained: int, epoch_end: bool) -> dict[str, Any]:
        return {
            **super().state(trained, epoch_end),
            "datasetStream": self.stream.state(trained, epoch_end=epoch_end),
        }

    def on_epoch_begin(self, model: keras.Model) -> None:
        self.skipped.begin(model)

    def ends_at(self, step: int, start: int, model: keras.Model) -> bool:
        # Keras leaves the epoch at once when the user stops: no next iterator.
        self.stream.stopped = bool(model.stop_training)
        if (self.steps and step >= self.steps) or not self.stream.ends_at(step):
            return False
        # The data's last batch: stop here rather than let Keras run its failing
        # end-of-data step, and apply that step's updates.
        if not model.stop_training:
            self.skipped.stop(step - start)
            self.end_stop = True
        return True

    def unstop(self, model: keras.Model) -> None:
        if self.end_stop:
            self.end_stop = False
            model.stop_training = self.stream.stopped
