"""Workarounds that make Keras 3.15 `fit` run under MultiWorkerMirroredStrategy.

Measured with two local workers (TF_CONFIG on loopback), plain Keras, no tuneop code:

1. `fit`/`evaluate` start with `_maybe_symbolic_build(iterator=...)`, which takes one
   distributed batch and calls `strategy.reduce("MEAN", (x, y), axis=None)` on it even
   when the model is already built. Under MWMS that raises `ValueError: Attempt to
   convert a value (PerReplica:{...}) with an unsupported type (<class
   '...PerReplica'>) to a Tensor` (the error every trial failed with). The trainer
   builds the model, metrics and optimizer itself before `fit`, so this step has
   nothing to do: it is skipped when everything is built.
2. Each step's logs are reduced with `strategy.reduce("MEAN", v, axis=0)`; the logs
   are scalars (metric results), so under MWMS that raises `Invalid reduction dimension
   0 for input with 0 dimensions`. Scalars are reduced with `axis=None` instead: the
   mean over the replicas, each holding its own replica's metric value over the same
   number of samples (fixed-size batches) - the cross-worker metric.

3. (Not a Keras bug.) When another worker dies, this worker's next collective fails
   (`UnavailableError: Collective ops is aborted by: ... tasks are unhealthy`).
   keras-tuner would record that as a FAILED trial in the shared oracle and go on; the
   trial is not at fault, the pod group is being replaced. So such an error raises
   `strategy.PeerLost` (a `Preempted`: exit 75, keras-tuner does not catch it) and the
   group resumes from the chief's last checkpoint.

Applied only when the strategy is MWMS (`apply(strategy)`), so the single-process
paths run unchanged Keras code. What the rest of the trainer asks of a group (is it one,
a barrier, the same value on every worker) lives beside the strategy (strategy.py).
"""

from __future__ import annotations

import logging
from typing import Any

from ..strategy import PeerLost, is_multiworker

log = logging.getLogger(__name__)

_applied = False


def apply(strategy: Any) -> bool:
    """Patch Keras's TF trainer if `strategy` is MWMS; True if patched (idempotent)."""
    global _applied
    if not is_multiworker(strategy):
        return False
    if _applied:
        return True
    from keras.src.backend.tensorflow import trainer as tf_trainer

    original_reduce = tf_trainer.reduce_per_replica
    original_build = tf_trainer.TensorFlowTrainer._maybe_symbolic_build

    def reduce_per_replica(values: Any, strategy: Any, reduction: str) -> Any:
        if reduction not in ("auto", "mean") or not is_multiworker(strategy):
            return original_reduce(values, strategy, reduction)

        def _reduce(v: Any) -> Any:
            import tensorflow as tf

            if not isinstance(v, tf.distribute.DistributedValues):
                return v  # one value already (Keras returns those as they are)
            first = strategy.experimental_local_results(v)[0]
            if first.shape.rank == 0:
                return strategy.reduce("MEAN", v, axis=None)
            return original_reduce(v, strategy, reduction)

        from keras.src import tree

        return tree.map_structure(_reduce, values)

    def _maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        if is_multiworker(self._distribute_strategy) and _fully_built(self):
            return None
        return original_build(self, iterator=iterator, data_batch=data_batch)

    from keras_tuner.src.engine import base_tuner

    _run_and_update_trial = _peer_lost(base_tuner.BaseTuner._run_and_update_trial)
    tf_trainer.reduce_per_replica = reduce_per_replica
    tf_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    base_tuner.BaseTuner._run_and_update_trial = _run_and_update_trial
    _applied = True
    return True


def _fully_built(model: Any) -> bool:
    """What keras `Trainer._symbolic_build` would build: nothing left (then it is a no-op)."""
    layers = all(layer.built for layer in model._flatten_layers())
    metrics = model._compile_metrics is None or model._compile_metrics.built
    loss = model._compile_loss is None or model._compile_loss.built
    optimizer = model.optimizer is None or model.optimizer.built
    return bool(layers and metrics and loss and optimizer)


def _peer_lost(original_run: Any) -> Any:
    """keras-tuner's `BaseTuner._run_and_update_trial`, a failed collective raising
    `PeerLost` (exit 75) instead of ending the trial FAILED."""
    import tensorflow as tf

    peer_errors = (
        tf.errors.UnavailableError,
        tf.errors.AbortedError,
        tf.errors.CancelledError,
        tf.errors.DeadlineExceededError,
    )

    def _run_and_update_trial(self: Any, trial: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original_run(self, trial, *args, **kwargs)
        except peer_errors as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            what = f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:300]
            log.warning(
                "trial %s: lost another worker (%s); exit to be restarted", trial.trial_id, what
            )
            raise PeerLost(what) from exc

    return _run_and_update_trial
