"""The script's `tf.distribute` strategies are the trainer's.

A keras-tuner script usually creates `strategy = tf.distribute.MirroredStrategy()` at
module level, passes it as `distribution_strategy=` and may enter `strategy.scope()`
itself (in `build`, around the final `fit`). The trainer has already created the one
strategy this pod's devices and TF_CONFIG call for (strategy.py: several GPUs or
logical CPUs → MirroredStrategy, several workers → MultiWorkerMirroredStrategy), and
TensorFlow allows only one per process for collectives. So while the script runs,
constructing `MirroredStrategy`, `MultiWorkerMirroredStrategy` (also the
`experimental` one) returns the trainer's strategy, logged once with the script's
line; their arguments (devices, cross-device ops, communication options) are ignored.
Everything the script does with `strategy` - `scope()`, `num_replicas_in_sync`,
passing it to a tuner - then works on the right devices, and objects built in the
script's scope and in the trainer's are in the same strategy.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

log = logging.getLogger(__name__)

NAMES = ("MirroredStrategy", "MultiWorkerMirroredStrategy")


def install(strategy: Any, script: str) -> None:
    import tensorflow as tf

    for name in NAMES:
        setattr(tf.distribute, name, _shared(getattr(tf.distribute, name), strategy, script))
    experimental = tf.distribute.experimental
    experimental.MultiWorkerMirroredStrategy = _shared(
        experimental.MultiWorkerMirroredStrategy, strategy, script
    )


def _shared(original: type, strategy: Any, script: str) -> type:
    """A stand-in for `original` whose construction returns `strategy`; isinstance and
    issubclass checks against it behave as against `original` (TensorFlow's own code
    and the script's may do them)."""
    if getattr(original, "_tuneop_shared", False):
        return original

    class Meta(type(original)):  # type: ignore[misc]
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, original)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, original)

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        # Not an instance of `cls` by type, so Python skips __init__.
        frame = next(
            (f for f in reversed(traceback.extract_stack()[:-1]) if f.filename == script),
            None,
        )
        where = f"{frame.filename}:{frame.lineno}" if frame else script
        log.info(
            "%s: tf.distribute.%s(%s) is the trainer's %s (%d replicas)",
            where,
            original.__name__,
            "..." if args or kwargs else "",
            type(strategy).__name__,
            strategy.num_replicas_in_sync,
        )
        return strategy

    shared = Meta(
        original.__name__,
        (original,),
        {"__new__": __new__, "_tuneop_shared": True, "__doc__": original.__doc__},
    )
    return shared
