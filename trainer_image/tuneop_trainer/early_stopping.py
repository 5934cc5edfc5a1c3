"""Early stopping in spec mode (`spec.tuner.earlyStopping`), with Keras's
EarlyStopping semantics, decided from the execution's metric history alone. The
history is in every checkpoint, so a resumed execution stops at exactly the epoch an
undisturbed one would, with no callback state to carry."""

from __future__ import annotations

import math

from .spec import EarlyStoppingSpec


def should_stop(values: list[float], rule: EarlyStoppingSpec) -> bool:
    """True once `rule.patience` epochs have passed without an improvement of more
    than `rule.min_delta` over the best value so far (Keras: `wait >= patience` after
    an epoch > 0)."""
    mode = rule.mode
    best = math.inf if mode == "min" else -math.inf
    wait = 0
    for epoch, value in enumerate(values):
        wait += 1
        better = value < best - rule.min_delta if mode == "min" else value > best + rule.min_delta
        if better:
            best, wait = value, 0
        elif wait >= rule.patience and epoch > 0:
            return True
    return False
