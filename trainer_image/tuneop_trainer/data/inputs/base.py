"""What the engine needs from a fit's input, whatever its kind (see __init__.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import keras
import keras_tuner


class UnsupportedFit(keras_tuner.errors.FatalError):  # type: ignore[misc]
    """A fit argument combination script mode cannot resume exactly."""


class ResumeMismatch(keras_tuner.errors.FatalError):  # type: ignore[misc]
    """The script, its data or its model differ from the checkpoint being resumed.
    A FatalError, so keras-tuner re-raises it instead of recording a failed trial."""


@dataclasses.dataclass(frozen=True)
class FitContext:
    """The fit an input belongs to: its bound `fit` arguments and identity."""

    args: dict[str, Any]
    script: str  # the program, for messages
    label: str  # the fit, for messages
    dir: Path  # its checkpoint directory
    root: Path  # the volume's root (iteration counts across processes)
    seed: int  # the fit's seed (epoch orders)
    known_digests: dict[int, tuple[Any, str]]  # id(array) -> a front end's digest


class FitInput:
    """One kind of training input. `steps` is the batches per epoch (0: until the input
    ends); `batch_size` the one validation defaults to."""

    kind: ClassVar[str]
    mid_epoch: ClassVar[bool] = True  # checkpoints inside an epoch resume exactly
    no_peek: ClassVar[bool] = False  # Keras must not peek at a first batch to build
    steps: int = 0
    batch_size: int | None = None

    def __init__(self, ctx: FitContext) -> None:
        self.ctx = ctx
        a = ctx.args
        self.x, self.y, self.sample_weight = a["x"], a["y"], a["sample_weight"]
        self.validation_data = a["validation_data"]
        self.batch_size = a["batch_size"]

    def fingerprint(self) -> Any:
        """What identifies the data (compared on resume)."""
        spec = getattr(self.x, "element_spec", None)
        return [type(self.x).__name__, str(spec) if spec is not None else None]

    def resume(self, meta: dict[str, Any]) -> None:
        """Put the input where the checkpoint `meta` left it ({} for a fresh fit)."""

    def build_batch(self) -> Any:
        """A batch to build the model from before training, or None."""
        return None

    def global_batch(self) -> int | None:
        """Samples in a full batch (split over the replicas), when known."""
        batch = self.build_batch()
        if batch is None:
            return None
        leaves = [leaf for leaf in keras.tree.flatten(batch) if leaf is not None]
        first = leaves[0].shape[0] if leaves and len(leaves[0].shape) else None
        return int(first) if first is not None else None

    def epoch(self, epoch: int, start: int) -> dict[str, Any]:
        """Keras `fit` arguments training batches [start, steps) of `epoch`."""
        raise NotImplementedError

    def end_epoch(self, trained: int) -> None:
        """After the epoch's Keras fit; `trained`: its batches trained in all."""

    def iterations(self) -> int:
        """Iterators (tf.data) or epochs (PyDataset) made on the object so far."""
        return 0

    def state(self, trained: int, epoch_end: bool) -> dict[str, Any]:
        """Checkpoint meta that puts the input back (`resume`): `trained` batches of
        the current epoch, `epoch_end` at its end-of-epoch save."""
        return {}

    def done(self) -> None:
        """The fit ended: what later fits of the process lineage need to know."""

    # Step hooks, for inputs whose end the trainer detects itself (tf.data).
    def on_epoch_begin(self, model: keras.Model) -> None:
        pass

    def ends_at(self, step: int, start: int, model: keras.Model) -> bool:
        """After batch `step` of an epoch resumed at `start`: True when the data
        ended there (the epoch ends)."""
        return False

    def unstop(self, model: keras.Model) -> None:
        """From validation on, `model.stop_training` is the user's callbacks' alone."""
