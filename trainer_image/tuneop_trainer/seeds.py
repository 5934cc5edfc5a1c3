"""Seeds derived from names, so a resumed process draws what an uninterrupted one did,
and the script's own random generators kept apart from the trainer's seeding."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import random
from collections.abc import Iterator
from typing import Any


def derive(text: str) -> int:
    """A 32-bit seed that is a pure function of `text` (e.g. "<seed>/<trial>/<n>")."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


@dataclasses.dataclass(frozen=True)
class Generators:
    """Where the process's global random streams stand: Python's `random`, NumPy's
    global `RandomState`, TensorFlow's global seed and eager op-seed stream, Keras's
    global seed and `SeedGenerator` (the ones `keras.utils.set_random_seed` resets)."""

    python: Any
    numpy: Any
    tf_seed: Any
    tf_ops: Any  # the eager context's op-seed Random's state, or None
    keras_seed: Any
    keras_generator: Any  # the global SeedGenerator object, or None
    keras_generator_state: Any  # its state variable's value


def capture() -> Generators:
    import numpy as np
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED
    from tensorflow.python.eager import context

    ctx = context.context()
    rng = getattr(ctx, "_rng", None)
    gen = global_state.get_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR)
    return Generators(
        python=random.getstate(),
        numpy=np.random.get_state(),
        tf_seed=ctx._seed,
        tf_ops=rng.getstate() if rng is not None else None,
        keras_seed=global_state.get_global_attribute(GLOBAL_RANDOM_SEED),
        keras_generator=gen,
        keras_generator_state=None if gen is None else gen.state.numpy(),
    )


def restore(state: Generators) -> None:
    import numpy as np
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED
    from tensorflow.python.eager import context

    random.setstate(state.python)
    np.random.set_state(state.numpy)
    ctx = context.context()
    ctx._seed = state.tf_seed
    if state.tf_ops is None:
        ctx._rng = None
    else:
        ctx._rng = random.Random()
        ctx._rng.setstate(state.tf_ops)
    global_state.set_global_attribute(GLOBAL_RANDOM_SEED, state.keras_seed)
    gen = state.keras_generator
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, gen)
    if gen is not None:
        gen.state.assign(state.keras_generator_state)


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Whatever the block seeds or draws, the script's generators are where they were
    after it: the trainer's seeding of trials and builds, keras-tuner's construction
    (a fresh tuner builds the model to see its space, a reloaded one does not) and
    fits restored as done draw nothing from the script's streams."""
    state = capture()
    try:
        yield
    finally:
        restore(state)
