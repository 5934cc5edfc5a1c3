"""Generators, infinite PyDatasets and PyDatasets read with their own `steps_per_epoch`:
inputs whose batches the trainer cannot pick, handed to Keras as they are and resumed at
the start of the interrupted epoch (checkpoints only at epoch ends), with a warning."""

from __future__ import annotations

import logging
from typing import Any

from .base import FitContext, FitInput

log = logging.getLogger(__name__)


class GeneratorInput(FitInput):
    kind = "other"
    mid_epoch = False

    def __init__(self, ctx: FitContext) -> None:
        super().__init__(ctx)
        spe = ctx.args["steps_per_epoch"]
        self.steps = int(spe) if spe else 0  # 0: the epoch ends when the input does

    def resume(self, meta: dict[str, Any]) -> None:
        log.warning(
            "%s: input is %s: resumes at the epoch start; exact only if its order does "
            "not depend on how often it was iterated before "
            "(docs/design/trainer.md, input kinds)",
            self.ctx.label,
            type(self.x).__name__,
        )

    def epoch(self, epoch: int, start: int) -> dict[str, Any]:
        a = self.ctx.args
        return {
            "x": self.x,
            "y": self.y,
            "sample_weight": self.sample_weight,
            "batch_size": a["batch_size"],
            "steps_per_epoch": a["steps_per_epoch"],
            "shuffle": a["shuffle"],
        }
