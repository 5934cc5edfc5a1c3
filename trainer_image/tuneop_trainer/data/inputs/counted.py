"""Inputs whose iterations (tf.data) or epochs (PyDataset) are counted on the object
across the fits of a process lineage (iterations.py): a resumed process replays the
count an uninterrupted one had made before this fit, so the object is in the state it
had."""

from __future__ import annotations

from typing import Any, ClassVar

from . import iterations
from .base import FitContext, FitInput


class CountedInput(FitInput):
    # Built from the input before training: Keras's first-batch peek would eat an owned
    # batch (tf.data) or start an epoch (PyDataset).
    no_peek: ClassVar[bool] = True

    def __init__(self, ctx: FitContext) -> None:
        super().__init__(ctx)
        self.base = 0  # made before this fit
        self.made = 0  # made so far, this fit's included

    def key(self) -> str:
        """The object's name in the volume's record of counts (iterations.py)."""
        raise NotImplementedError

    def resume(self, meta: dict[str, Any]) -> None:
        recorded = meta.get("datasetIterationsBefore")
        self.base = (
            int(recorded)
            if recorded is not None
            else iterations.before_fit(self.x, self.ctx.root, self.key())
        )
        self.made = self.base

    def made_by_done_fit(self, meta: dict[str, Any]) -> int:
        return int(meta.get("datasetIterations", self.base))

    def iterations(self) -> int:
        return self.made

    def state(self, trained: int, epoch_end: bool) -> dict[str, Any]:
        return {"datasetIterationsBefore": self.base, "datasetIterations": self.iterations()}

    def done(self) -> None:
        iterations.record(self.ctx.root, self.x, self.key(), self.iterations())
