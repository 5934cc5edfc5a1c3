"""Keras 3 + MirroredStrategy: batches that do not split evenly across replicas.

Cause (keras 3.15.1, `keras/src/backend/tensorflow/trainer.py`): at the start of every
`fit`/`evaluate`/`predict` the TF trainer takes the FIRST distributed batch and averages
it across replicas (`strategy.reduce("MEAN", batch)`), only to get tensors of the right
shape for `_symbolic_build`. That AddN needs equal per-replica shapes, so a first batch
that splits unevenly - e.g. 13 validation samples (one partial batch) on 2 replicas,
split 7/6 - fails with "Inputs to operation AddN ... must have the same size and shape".
The training and test steps themselves handle uneven (even empty) per-replica batches
correctly: the loss tracker and metrics are weighted by each replica's sample count.

Fix: `install()` hands keras the first replica's local batch instead of that average: the
same structure and dtypes and, for an even split, the same shapes - and only shapes
matter to `_symbolic_build` - so runs whose batches split evenly are unchanged. The
trainer installs it with patches.install().
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from keras.src.backend.tensorflow import trainer as tf_trainer


def _first_replica(value: Any, strategy: Any) -> Any:
    if isinstance(value, tf.distribute.DistributedValues):
        return strategy.experimental_local_results(value)[0]
    return value


def install() -> None:
    """Wrap keras' TensorFlowTrainer._maybe_symbolic_build (all models) once per process.

    Under MirroredStrategy the first batch is taken here, as keras would, but from the
    first replica instead of the cross-replica mean; then the wrapped method builds from
    that batch. Other strategies (e.g. MultiWorkerMirrored, see multiworker.py, which
    may wrap this method too) go to the wrapped method unchanged.
    """
    cls = tf_trainer.TensorFlowTrainer
    inner = cls._maybe_symbolic_build
    if getattr(inner, "_tuneop_uneven", False):
        return

    def _maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        strategy = self._distribute_strategy
        if iterator is not None and isinstance(strategy, tf.distribute.MirroredStrategy):
            for _, _, it in iterator:
                batch = next(it)
                data_batch = tf.nest.map_structure(lambda v: _first_replica(v, strategy), batch)
                break
            iterator = None
        return inner(self, iterator=iterator, data_batch=data_batch)

    _maybe_symbolic_build._tuneop_uneven = True  # type: ignore[attr-defined]
    cls._maybe_symbolic_build = _maybe_symbolic_build
