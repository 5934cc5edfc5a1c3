"""`spec.checkpoint`: the claim the search is kept on (the operator makes or reuses it)
and how often the trainer checkpoints to it."""

from __future__ import annotations

import dataclasses

from .. import CHECKPOINT_INTERVAL_AUTO
from .errors import SpecError
from .read import Doc, flag, integer, quoted, string, strings

DEFAULT_ACCESS_MODE = "ReadWriteOnce"
PARALLEL_ACCESS_MODE = "ReadWriteMany"
"""The default with parallel trials: trial groups may land on different nodes and all
share the checkpoint claim."""
STALL_TIMEOUT_SECONDS = 900
"""`spec.stallTimeoutSeconds`' default: the operator's stall rule, and the cap of an
auto checkpoint interval."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    existing_claim: str = ""
    size: str = "1Gi"
    storage_class_name: str = ""
    access_modes: tuple[str, ...] = (DEFAULT_ACCESS_MODE,)
    reclaim_policy: str = "Retain"
    interval_steps: int = 0
    interval_seconds: int = 60
    """Fixed interval (0 = off); with auto_interval the interval before any save is measured."""
    auto_interval: bool = False
    """`intervalSeconds: auto`: the interval adapts to the save cost and the MTBF (the
    trainer's checkpoint/cadence.py)."""
    max_interval_seconds: float = float(STALL_TIMEOUT_SECONDS)
    """`spec.stallTimeoutSeconds`: an auto interval stays within it, so the
    checkpoint-age alert (a checkpoint older than that) keeps its meaning."""
    keep: int = 2
    adopt: bool = False
    """Continue a search the volume records for another TuningJob (the trainer checks)."""


def parse_checkpoint(c: Doc, parallel: bool, max_interval: float) -> Checkpoint:
    """`parallel`: the job runs parallel trials (their access mode by default);
    `max_interval`: the job's stall timeout."""
    field = "spec.checkpoint"
    seconds = c.get("intervalSeconds", Checkpoint.interval_seconds)
    auto = seconds == CHECKPOINT_INTERVAL_AUTO
    if auto:
        seconds = Checkpoint.interval_seconds
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise SpecError(
            f"{field}.intervalSeconds",
            f'{quoted(seconds)} must be an integer >= 0 (0 = off) or "{CHECKPOINT_INTERVAL_AUTO}"',
        )
    steps = integer(c, "intervalSteps", f"{field}.intervalSteps", Checkpoint.interval_steps, 0)
    keep = integer(c, "keep", f"{field}.keep", Checkpoint.keep, minimum=1)
    adopt = flag(c, "adopt", f"{field}.adopt")
    modes = strings(c, "accessModes", f"{field}.accessModes", "must be a list of access modes")
    return Checkpoint(
        existing_claim=string(c, "existingClaim", f"{field}.existingClaim", ""),
        size=string(c, "size", f"{field}.size", "") or Checkpoint.size,
        storage_class_name=string(c, "storageClassName", f"{field}.storageClassName", ""),
        access_modes=modes or ((PARALLEL_ACCESS_MODE,) if parallel else (DEFAULT_ACCESS_MODE,)),
        reclaim_policy=string(c, "reclaimPolicy", f"{field}.reclaimPolicy", "")
        or Checkpoint.reclaim_policy,
        interval_steps=steps,
        interval_seconds=seconds,
        auto_interval=auto,
        max_interval_seconds=max_interval,
        keep=keep,
        adopt=adopt,
    )


def check_checkpoint(checkpoint: Checkpoint) -> list[SpecError]:
    """An existing claim is never deleted: not with `reclaimPolicy: Delete`."""
    if checkpoint.existing_claim and checkpoint.reclaim_policy == "Delete":
        return [
            SpecError(
                "spec.checkpoint.reclaimPolicy",
                "Delete cannot be used with existingClaim (an existing claim is never deleted)",
            )
        ]
    return []
