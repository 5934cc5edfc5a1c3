"""`spec.tuner`: the keras-tuner search of a spec-mode job (the trainer runs it)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from .errors import SpecError
from .read import Doc, flag, integer, mapping, one_of, quoted, string

ALGORITHMS = ("Hyperband", "RandomSearch", "BayesianOptimization", "GridSearch")
DIRECTIONS = ("max", "min")
DTYPE_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
CALLBACK_REF = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*([.:][A-Za-z_]\w*(\.[A-Za-z_]\w*)*)")
"""A class reference: `keras.callbacks.ReduceLROnPlateau` or `pkg.module:Name`."""

MetricDirection = Callable[[str], str | None]
"""keras-tuner's direction for a metric name ("min", "max" or None). The trainer passes
it; the operator has no keras-tuner, and a direction only it can tell stays unknown."""


@dataclasses.dataclass(frozen=True)
class EarlyStoppingSpec:
    """`spec.tuner.earlyStopping`: stop an execution when `monitor` stops improving."""

    monitor: str = "val_loss"
    patience: int = 0
    min_delta: float = 0.0
    mode: str = "min"  # "min" or "max"; `auto` in the spec is resolved from the monitor


@dataclasses.dataclass(frozen=True)
class CallbackSpec:
    """`spec.tuner.callbacks[i]`: a Keras callback class by reference and its arguments,
    given to every trial's fit (its state restored after a kill, as a script's)."""

    ref: str  # "pkg.module.Name" or "pkg.module:Name"
    args: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TunerSpec:
    """The search. Its fields are part of the search's fingerprint on the checkpoint
    volume (`fingerprint.json`): renaming one makes every existing volume's search look
    changed to the trainer that resumes it."""

    algorithm: str = "Hyperband"
    objective: str = "val_accuracy"
    direction: str | None = "max"
    """Resolved from the objective's name when the spec gives none (None: only
    keras-tuner can tell, and it was not asked)."""
    max_trials: int = 10
    max_epochs: int = 4
    factor: int = 3
    hyperband_iterations: int = 1
    executions_per_trial: int = 1
    seed: int = 42
    batch_size: int = 32
    deterministic: bool = False
    early_stopping: EarlyStoppingSpec | None = None
    dtype_policy: str | None = None  # Keras dtype policy, e.g. "mixed_bfloat16"
    tensorboard: bool = False  # per-trial TensorBoard logs with HParams (keras-tuner's layout)
    callbacks: tuple[CallbackSpec, ...] = ()


def parse_tuner(t: Doc, metric_direction: MetricDirection | None) -> TunerSpec:
    algorithm = string(t, "algorithm", "spec.tuner.algorithm", TunerSpec.algorithm)
    one_of(algorithm, ALGORITHMS, "spec.tuner.algorithm")
    name, direction = _objective(t, metric_direction)
    deterministic = flag(t, "deterministic", "spec.tuner.deterministic")
    tensorboard = flag(t, "tensorboard", "spec.tuner.tensorboard")
    return TunerSpec(
        algorithm=algorithm,
        objective=name,
        direction=direction,
        max_trials=_count(t, "maxTrials", TunerSpec.max_trials, 1),
        max_epochs=_count(t, "maxEpochs", TunerSpec.max_epochs, 1),
        factor=_count(t, "factor", TunerSpec.factor, 2),
        hyperband_iterations=_count(t, "hyperbandIterations", TunerSpec.hyperband_iterations, 1),
        executions_per_trial=_count(t, "executionsPerTrial", TunerSpec.executions_per_trial, 1),
        seed=_count(t, "seed", TunerSpec.seed, 0),
        batch_size=_count(t, "batchSize", TunerSpec.batch_size, 1),
        deterministic=deterministic,
        early_stopping=_early_stopping(t, metric_direction),
        dtype_policy=_dtype_policy(t),
        tensorboard=tensorboard,
        callbacks=_callbacks(t),
    )


def _count(t: Doc, key: str, default: int, minimum: int) -> int:
    return integer(t, key, f"spec.tuner.{key}", default, minimum)


def _objective(t: Doc, metric_direction: MetricDirection | None) -> tuple[str, str | None]:
    obj = t.get("objective", {})
    if isinstance(obj, str):  # shorthand: `objective: val_loss` (direction inferred)
        obj = {"name": obj}
    if not isinstance(obj, dict):
        raise SpecError("spec.tuner.objective", "must be a mapping {name, direction}")
    name = string(obj, "name", "spec.tuner.objective.name", TunerSpec.objective)
    if not name:
        raise SpecError("spec.tuner.objective.name", "must not be empty")
    direction: str | None = string(obj, "direction", "spec.tuner.objective.direction", "")
    if not direction:
        direction = infer_direction(name, metric_direction)
    if direction is not None:
        one_of(direction, DIRECTIONS, "spec.tuner.objective.direction")
    return name, direction


def infer_direction(name: str, metric_direction: MetricDirection | None) -> str | None:
    """The direction keras-tuner infers for a metric name: `val_loss` → min,
    `val_accuracy` → max, any other Keras metric or loss by its name (asked of
    `metric_direction`; None without it). SpecError when it cannot tell (a custom
    metric: say `direction: min` or `max`)."""
    base = name.removeprefix("val_").removeprefix("weighted_")
    if base in ("loss", "crossentropy", "ce") or base.endswith("_loss"):
        return "min"
    if base in ("accuracy", "acc"):
        return "max"
    if metric_direction is None:
        return None
    direction = metric_direction(name)
    if direction not in DIRECTIONS:
        raise SpecError(
            "spec.tuner.objective.direction",
            f'cannot tell whether "{name}" is to be minimised or maximised; set direction: '
            "min or max",
        )
    return str(direction)


def _dtype_policy(t: Doc) -> str | None:
    if t.get("dtypePolicy") is None:
        return None
    policy = string(t, "dtypePolicy", "spec.tuner.dtypePolicy", "float32")
    one_of(policy, DTYPE_POLICIES, "spec.tuner.dtypePolicy")
    return policy


def _early_stopping(t: Doc, metric_direction: MetricDirection | None) -> EarlyStoppingSpec | None:
    if t.get("earlyStopping") is None:
        return None
    e = mapping(t, "earlyStopping", "spec.tuner.earlyStopping")
    field = "spec.tuner.earlyStopping"
    monitor = string(e, "monitor", f"{field}.monitor", EarlyStoppingSpec.monitor)
    min_delta = e.get("minDelta", EarlyStoppingSpec.min_delta)
    if isinstance(min_delta, bool) or not isinstance(min_delta, int | float) or min_delta < 0:
        raise SpecError(f"{field}.minDelta", f"{quoted(min_delta)} must be a number >= 0")
    mode = string(e, "mode", f"{field}.mode", "auto")
    one_of(mode, ("auto", "min", "max"), f"{field}.mode")
    if mode == "auto":  # resolved here, as for the objective
        try:
            mode = infer_direction(monitor, metric_direction) or mode
        except SpecError:
            raise SpecError(
                f"{field}.mode",
                f'cannot tell whether "{monitor}" is to be minimised or maximised; set mode: '
                "min or max",
            ) from None
    return EarlyStoppingSpec(
        monitor=monitor,
        patience=integer(e, "patience", f"{field}.patience", EarlyStoppingSpec.patience, 0),
        min_delta=float(min_delta),
        mode=mode,
    )


def _callbacks(t: Doc) -> tuple[CallbackSpec, ...]:
    given = t.get("callbacks")
    if given is None:
        return ()
    if not isinstance(given, list):
        raise SpecError("spec.tuner.callbacks", "must be a list of {class, args}")
    return tuple(_callback(item, f"spec.tuner.callbacks[{i}]") for i, item in enumerate(given))


def _callback(item: Any, field: str) -> CallbackSpec:
    if not isinstance(item, dict):
        raise SpecError(field, "must be a mapping {class, args}")
    unknown = sorted(set(item) - {"class", "args"})
    if unknown:
        raise SpecError(f"{field}.{unknown[0]}", "is not a field of a callback (class, args)")
    ref = string(item, "class", f"{field}.class", "")
    if not CALLBACK_REF.fullmatch(ref):
        raise SpecError(
            f"{field}.class",
            f'{quoted(ref)} is not a class reference such as "keras.callbacks.ReduceLROnPlateau" '
            'or "pkg.module:Name"',
        )
    args = item.get("args") or {}
    if not isinstance(args, dict):
        raise SpecError(f"{field}.args", "must be a mapping of argument names to values")
    return CallbackSpec(ref, dict(args))
