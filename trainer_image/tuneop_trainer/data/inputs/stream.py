"""A `tf.data.Dataset` input, iterated by the trainer as one Keras `fit` iterates it.

Keras's epoch iterator (keras/src/trainers/epoch_iterator.py) makes a new iterator over
the dataset at every epoch without `steps_per_epoch`; with it, one iterator runs on
across epochs (an infinite `repeat()` stream), replaced when the dataset's known
number of batches is used up or when it runs out. A dataset's reshuffling
(`shuffle(..., reshuffle_each_iteration=True)`) draws a new order at every iterator
made on it, so what a batch holds depends on how many iterators were made before and
how far the current one has gone. The trainer runs one Keras `fit` per epoch
(fit.py), so it makes those iterators itself, by Keras's rules, and hands each epoch's
batches to Keras through one `from_generator` pipeline per fit. The position is then
three numbers - iterators made on the dataset object in this process lineage (across
earlier fits too), batches taken from the current one, the number of batches once
known - kept in every checkpoint: a resumed process makes (and drops) the iterators an
uninterrupted one had made, then skips the batches already trained (reading them
once, no training). Exact when the pipeline is deterministic given the seeds.

Under MultiWorkerMirroredStrategy every worker iterates the whole pipeline and keeps
its part of each global batch (`AutoShardPolicy.DATA`, what Keras does for arrays), so
every worker sees the same batches as an uninterrupted group; a pipeline the user
shards by hand (`AutoShardPolicy.OFF`, `dataset.shard(...)`) stays unsharded. File
sharding (Keras's AUTO on TFRecord files) would give each worker a different reader
whose order a resume cannot rebuild without the same files' split, so it is not used:
each worker reads all the files.
"""

from __future__ import annotations

from typing import Any

from ...strategy import is_multiworker
from . import iterations


class ShorterThanCheckpoint(ValueError):
    """The dataset ran out before the position a checkpoint records: its data changed."""


class Stream:
    """One fit's view of a dataset: `begin_epoch` / `end_epoch` around each Keras fit,
    `state(step)` for a checkpoint, `restore(state)` on resume, `start(before)` when
    the fit starts without one (`before`: iterators made on it earlier, iterations.py)."""

    def __init__(self, dataset: Any, steps_per_epoch: int | None) -> None:
        import tensorflow as tf

        self.dataset = dataset
        self.spe = int(steps_per_epoch) if steps_per_epoch else None
        cardinality = int(dataset.cardinality())
        self.num_batches: int | None = cardinality if cardinality > 0 else None
        self.repeats = cardinality == tf.data.INFINITE_CARDINALITY
        self.iterations = 0  # iterators made on the dataset in this lineage, current included
        self.iterator: Any = None
        self.seen = 0  # batches taken from `iterator` and trained
        self.epoch_start = 0  # `seen` at the epoch's first batch
        self.planned: int | None = None  # batches the epoch may take (None: to the end)
        self.ran_out_at: int | None = None  # `iterator` ended after this many batches
        self.counted = False  # the epoch runs a counted loop (Keras's steps_per_epoch > 0)
        self.stopped = False  # a callback stopped training at a batch (set by the fit)
        self.last_taken: int | None = None  # `seen` after the data's last batch, once read

        policy = tf.data.experimental.AutoShardPolicy
        options = tf.data.Options()
        user = dataset.options().experimental_distribute.auto_shard_policy
        options.experimental_distribute.auto_shard_policy = (
            policy.OFF if user == policy.OFF else policy.DATA
        )
        self.pipeline = tf.data.Dataset.from_generator(
            self._batches, output_signature=dataset.element_spec
        ).with_options(options)

    # -- iterators ----------------------------------------------------------------------
    def _new_iterator(self) -> None:
        self.iterator = iter(self.dataset)
        count = iterations.counter(self.dataset)
        count[0] += 1
        self.iterations = count[0]
        self.seen = 0
        self.ran_out_at = None

    def start(self, before: int) -> None:
        self._catch_up(before)

    def _catch_up(self, target: int) -> None:
        # The dropped iterators' reshuffle draws are what count.
        iterations.catch_up(self.dataset, target, lambda: iter(self.dataset))
        self.iterations = iterations.counter(self.dataset)[0]

    def restore(self, state: dict[str, Any]) -> None:
        """Back to a checkpoint's `state()`."""
        alive = bool(state["alive"])
        self._catch_up(int(state["iterations"]) - (1 if alive else 0))
        self.num_batches = state.get("numBatches")
        if alive:
            self._new_iterator()
            for taken in range(int(state["seen"])):
                try:
                    next(self.iterator)
                except StopIteration:
                    raise ShorterThanCheckpoint(
                        f"it ended after {taken} batches, before the {state['seen']} its "
                        "checkpoint had trained"
                    ) from None
            self.seen = int(state["seen"])

    def state(self, step: int, epoch_end: bool = False) -> dict[str, Any]:
        """The position after `step` batches of the current epoch; `epoch_end`: as it
        will be once the epoch is over (`end_epoch`)."""
        made, alive, seen, num_batches, _ = self._after(step, epoch_end)
        return {
            "iterations": made,
            "seen": seen,
            "alive": alive,
            "numBatches": num_batches,
        }

    # -- epochs: Keras's EpochIterator._enumerate_iterator, one step per execution --------
    def begin_epoch(self, start: int) -> int | None:
        """Set up the epoch whose first `start` batches are trained already (a resume
        restored them); the number of batches Keras may still take (None: to the end)."""
        steps = self.spe or self.num_batches or -1
        if not start and (steps < 0 or self.iterator is None or self.spe is None):
            self._new_iterator()  # with steps < 0 Keras's iterator is the epoch's own
        self.epoch_start = self.seen - start
        self.counted = steps > 0
        self.stopped = False
        self.last_taken = None
        if steps > 0:
            end = self.epoch_start + steps
            if self.num_batches:  # Keras stops the epoch at the data's known end
                end = min(end, max(self.num_batches, self.epoch_start))
            self.planned = end - self.epoch_start
            return self.planned - start
        self.planned = None
        return None

    def end_epoch(self, trained: int) -> None:
        """After the epoch's Keras fit, which trained `trained` batches in all."""
        _, alive, seen, self.num_batches, fresh = self._after(trained, True)
        if fresh:
            self._new_iterator()
        elif not alive:
            self.iterator = None
        self.seen = seen
        self.epoch_start = seen
        self.ran_out_at = None

    def _after(self, step: int, epoch_end: bool) -> tuple[int, bool, int, int | None, bool]:
        """(iterators made, current alive, its position, known batches, a new iterator
        made) after `step` batches of the epoch, at its end if `epoch_end`."""
        seen = self.epoch_start + step
        if self.ran_out_at is not None and seen >= self.ran_out_at:
            # Keras counted the failed step too, and drops the iterator.
            known = self.num_batches if self.num_batches is not None else seen + 1
            return self.iterations, False, 0, known, False
        used_up = self.num_batches is not None and seen >= self.num_batches
        if epoch_end and self.counted and used_up and not self.stopped:
            # The loop ran to its end: Keras makes the next iterator at once.
            return self.iterations + 1, True, 0, self.num_batches, True
        return self.iterations, self.iterator is not None, seen, self.num_batches, False

    def ends_at(self, step: int) -> bool:
        """Batch `step` of the epoch (1-based) was the data's last: Keras is stopped
        after it instead of running its failing end-of-data step (end_of_data.py)."""
        return self.last_taken is not None and self.epoch_start + step >= self.last_taken

    def _batches(self) -> Any:
        """The current epoch's batches, never more than it may take: whatever Keras
        prefetches beyond the epoch would otherwise be lost from a running stream.
        One batch is read ahead within the epoch, so the data's last batch is known
        (`last_taken`) by the time Keras trains on it."""
        taken = self.seen
        end = None if self.planned is None else self.epoch_start + self.planned
        iterator = self.iterator
        if iterator is None or (end is not None and taken >= end):
            return
        ahead = _take(iterator)
        if ahead is _END:  # nothing left: Keras's own end-of-data step follows
            self.ran_out_at = taken
            return
        while ahead is not _END:
            batch, taken = ahead, taken + 1
            ahead = _END if end is not None and taken >= end else _take(iterator)
            if ahead is _END and (end is None or taken < end):
                self.ran_out_at = self.last_taken = taken
            yield batch


_END = object()


def _take(iterator: Any) -> Any:
    try:
        return next(iterator)
    except StopIteration:
        return _END


def spec_batch(spec: Any) -> Any:
    """Zeros shaped like one element of `spec` (unknown dimensions as 1): what a model
    is built from without iterating the dataset, which would advance its reshuffling."""
    import tensorflow as tf

    def zeros(s: Any) -> Any:
        shape = [1 if d is None else d for d in s.shape.as_list()]
        return tf.zeros(shape, s.dtype)

    return tf.nest.map_structure(zeros, spec)


def data_sharded(dataset: Any, strategy: Any) -> Any:
    """Validation data under MultiWorkerMirroredStrategy: Keras's AUTO policy shards a
    file-based pipeline by file and fails when it has fewer files than workers (one
    validation file is common); DATA evaluates the same batches in every case."""
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset) or not is_multiworker(strategy):
        return dataset
    policy = tf.data.experimental.AutoShardPolicy
    if dataset.options().experimental_distribute.auto_shard_policy != policy.AUTO:
        return dataset
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy.DATA
    return dataset.with_options(options)
