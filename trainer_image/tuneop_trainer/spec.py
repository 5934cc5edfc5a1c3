"""Parse and validate a TuningJob spec (or a whole manifest) into dataclasses.

Every problem becomes a `SpecError` whose one-line message names the field and says
what is allowed, e.g. `spec.tuner.algorithm: "Foo" is not one of Hyperband, ...`.
The CLI prints it, writes it to the termination-message path and exits 2.
Only the fields the trainer uses are validated here; pod-level fields (resources,
tolerations, ...) belong to the operator and are ignored.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml
from tuneop_contract import CHECKPOINT_INTERVAL_AUTO

ALGORITHMS = ("Hyperband", "RandomSearch", "BayesianOptimization", "GridSearch")
DIRECTIONS = ("max", "min")
STRATEGIES = ("Auto", "Mirrored", "MultiWorkerMirrored")


class SpecError(Exception):
    """A spec problem; str() is the one-line message (field: what is wrong)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


@dataclasses.dataclass(frozen=True)
class DataSpec:
    synthetic_samples: int | None = 256
    synthetic_seed: int = 0
    path: str | None = None
    loader: str | None = None
    validation_split: float = 0.2


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


CALLBACK_REF = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*([.:][A-Za-z_]\w*(\.[A-Za-z_]\w*)*)")
"""A class reference: `keras.callbacks.ReduceLROnPlateau` or `pkg.module:Name`."""


@dataclasses.dataclass(frozen=True)
class TunerSpec:
    algorithm: str = "Hyperband"
    objective: str = "val_accuracy"
    direction: str = "max"
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


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    interval_steps: int = 0
    interval_seconds: float = 60.0
    """Fixed interval (0 = off); with auto_interval the interval before any save is measured."""
    auto_interval: bool = False
    """`intervalSeconds: auto`: the interval adapts to the save cost and the MTBF (cadence.py)."""
    max_interval_seconds: float | None = None
    """`spec.stallTimeoutSeconds` when the spec has it: an auto interval stays within it,
    so the checkpoint-age alert (a checkpoint older than that) keeps its meaning."""
    keep: int = 2
    adopt: bool = False
    """Continue a search the volume records for another TuningJob (checkpoint/ownership.py)."""


@dataclasses.dataclass(frozen=True)
class ScriptSpec:
    """`spec.script`: the user's own keras-tuner script (script mode)."""

    path: str  # resolved: a ConfigMap key under tuneop_contract.SCRIPT_DIR, or spec.script.path
    args: tuple[str, ...] = ()
    deterministic: bool = False
    field: str = "spec.script.path"  # named in errors about the file
    continue_optimizer: bool = False  # spec.script.continueOptimizerState
    requirements: str = ""  # resolved path of spec.script.requirements, "" = none


@dataclasses.dataclass(frozen=True)
class TrainerSpec:
    hypermodel: str = "tuneop_trainer.examples.emg:CNNHyperModel"
    script: ScriptSpec | None = None
    python_path: tuple[str, ...] = ()
    data: DataSpec = dataclasses.field(default_factory=DataSpec)
    tuner: TunerSpec = dataclasses.field(default_factory=TunerSpec)
    checkpoint: CheckpointSpec = dataclasses.field(default_factory=CheckpointSpec)
    strategy: str = "Auto"
    workers: int = 1
    job_name: str | None = None


def load_spec_file(path: str | Path) -> TrainerSpec:
    """Read a YAML file holding a TuningJob manifest or just its `spec`."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SpecError("--spec", f"cannot read {path}: {exc.strerror}") from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError("--spec", f"{path} is not valid YAML: {_one_line(exc)}") from exc
    return parse(doc)


def parse(doc: Any) -> TrainerSpec:
    """A manifest (`kind: TuningJob`) or a bare spec mapping → TrainerSpec."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise SpecError("spec", "must be a mapping")
    job_name = None
    if "kind" in doc or "apiVersion" in doc:
        if doc.get("kind") != "TuningJob":
            raise SpecError("kind", f"{_q(doc.get('kind'))} is not TuningJob")
        meta = doc.get("metadata") or {}
        job_name = meta.get("name") if isinstance(meta, dict) else None
        doc = doc.get("spec") or {}
        if not isinstance(doc, dict):
            raise SpecError("spec", "must be a mapping")

    script = _parse_script(doc)
    hypermodel = _str(doc, "hypermodel", "spec.hypermodel", TrainerSpec.hypermodel)
    if ":" not in hypermodel or not all(hypermodel.split(":", 1)):
        raise SpecError("spec.hypermodel", f'{_q(hypermodel)} is not of the form "pkg.module:Name"')
    python_path = doc.get("pythonPath") or []
    if not isinstance(python_path, list) or not all(isinstance(p, str) for p in python_path):
        raise SpecError("spec.pythonPath", "must be a list of directory paths")

    dist = _map(doc, "distribution", "spec.distribution")
    strategy = _str(dist, "strategy", "spec.distribution.strategy", "Auto")
    _one_of(strategy, STRATEGIES, "spec.distribution.strategy")
    workers = _int(dist, "workers", "spec.distribution.workers", 1, minimum=1)

    return TrainerSpec(
        hypermodel=hypermodel,
        script=script,
        python_path=tuple(python_path),
        data=_parse_data(_map(doc, "data", "spec.data")),
        tuner=_parse_tuner(_map(doc, "tuner", "spec.tuner")),
        checkpoint=_parse_checkpoint(
            _map(doc, "checkpoint", "spec.checkpoint"), doc.get("stallTimeoutSeconds")
        ),
        strategy=strategy,
        workers=workers,
        job_name=job_name,
    )


def _parse_script(doc: dict[str, Any]) -> ScriptSpec | None:
    """`spec.script` → ScriptSpec with the script's path inside the pod."""
    from tuneop_contract import DEFAULT_SCRIPT_KEY, SCRIPT_DIR

    if doc.get("script") is None:
        return None
    for other in ("hypermodel", "data", "tuner"):
        if doc.get(other) is not None:
            raise SpecError(
                f"spec.{other}", "must not be set with spec.script (the script defines it)"
            )
    s = _map(doc, "script", "spec.script")
    if ("configMap" in s) == ("path" in s):
        raise SpecError("spec.script", "set exactly one of configMap and path")
    args = s.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise SpecError("spec.script.args", "must be a list of strings")
    deterministic = s.get("deterministic", False)
    if not isinstance(deterministic, bool):
        raise SpecError("spec.script.deterministic", f"{_q(deterministic)} must be true or false")
    keep = s.get("continueOptimizerState", False)
    if not isinstance(keep, bool):
        raise SpecError("spec.script.continueOptimizerState", f"{_q(keep)} must be true or false")
    requirements = _str(s, "requirements", "spec.script.requirements", "")
    if "path" in s:
        path = _str(s, "path", "spec.script.path", "")
        if not path.startswith("/"):
            raise SpecError("spec.script.path", f"{_q(path)} must be an absolute path")
        if requirements and not requirements.startswith("/"):
            raise SpecError(
                "spec.script.requirements",
                f"{_q(requirements)} must be an absolute path with spec.script.path",
            )
        return ScriptSpec(path, tuple(args), deterministic, "spec.script.path", keep, requirements)
    cm = _map(s, "configMap", "spec.script.configMap")
    key = cm.get("key")
    if key is None:
        key = _only_key(Path(SCRIPT_DIR), besides=requirements) or DEFAULT_SCRIPT_KEY
    if not isinstance(key, str) or not key or "/" in key:
        raise SpecError("spec.script.configMap.key", f"{_q(key)} must be a ConfigMap key")
    if requirements and not requirements.startswith("/"):
        requirements = str(Path(SCRIPT_DIR) / requirements)
    return ScriptSpec(
        str(Path(SCRIPT_DIR) / key), tuple(args), deterministic, "spec.script.configMap.key",
        keep, requirements,
    )  # fmt: skip


def _only_key(directory: Path, besides: str = "") -> str | None:
    """The single key of a mounted ConfigMap (its volume also holds `..data` links),
    the requirements file's key aside."""
    try:
        keys = [p.name for p in directory.iterdir() if p.name[0] != "." and p.name != besides]
    except OSError:
        return None
    return keys[0] if len(keys) == 1 else None


def _parse_data(d: dict[str, Any]) -> DataSpec:
    sources = [k for k in ("synthetic", "path", "loader") if d.get(k) is not None]
    if len(sources) > 1:
        raise SpecError("spec.data", f"set exactly one of synthetic, path, loader (got {sources})")
    split = d.get("validationSplit", 0.2)
    if isinstance(split, bool) or not isinstance(split, int | float) or not 0 <= split < 1:
        raise SpecError("spec.data.validationSplit", f"{_q(split)} must be a number in [0, 1)")
    if sources == ["path"]:
        path = _str(d, "path", "spec.data.path", "")
        return DataSpec(synthetic_samples=None, path=path, validation_split=float(split))
    if sources == ["loader"]:
        loader = _str(d, "loader", "spec.data.loader", "")
        if ":" not in loader:
            raise SpecError("spec.data.loader", f'{_q(loader)} is not of the form "pkg.module:fn"')
        return DataSpec(synthetic_samples=None, loader=loader, validation_split=float(split))
    syn = _map(d, "synthetic", "spec.data.synthetic")
    return DataSpec(
        synthetic_samples=_int(syn, "samples", "spec.data.synthetic.samples", 256, minimum=8),
        synthetic_seed=_int(syn, "seed", "spec.data.synthetic.seed", 0, minimum=0),
        validation_split=float(split),
    )


def _parse_tuner(t: dict[str, Any]) -> TunerSpec:
    algorithm = _str(t, "algorithm", "spec.tuner.algorithm", "Hyperband")
    _one_of(algorithm, ALGORITHMS, "spec.tuner.algorithm")
    obj = t.get("objective", {})
    if isinstance(obj, str):  # shorthand: `objective: val_loss` (direction inferred)
        obj = {"name": obj}
    if not isinstance(obj, dict):
        raise SpecError("spec.tuner.objective", "must be a mapping {name, direction}")
    name = _str(obj, "name", "spec.tuner.objective.name", "val_accuracy")
    if not name:
        raise SpecError("spec.tuner.objective.name", "must not be empty")
    direction = _str(obj, "direction", "spec.tuner.objective.direction", "")
    if not direction:
        direction = infer_direction(name)
    _one_of(direction, DIRECTIONS, "spec.tuner.objective.direction")
    deterministic = t.get("deterministic", False)
    if not isinstance(deterministic, bool):
        raise SpecError("spec.tuner.deterministic", f"{_q(deterministic)} must be true or false")
    tensorboard = t.get("tensorboard", False)
    if not isinstance(tensorboard, bool):
        raise SpecError("spec.tuner.tensorboard", f"{_q(tensorboard)} must be true or false")
    return TunerSpec(
        algorithm=algorithm,
        objective=name,
        direction=direction,
        max_trials=_int(t, "maxTrials", "spec.tuner.maxTrials", 10, minimum=1),
        max_epochs=_int(t, "maxEpochs", "spec.tuner.maxEpochs", 4, minimum=1),
        factor=_int(t, "factor", "spec.tuner.factor", 3, minimum=2),
        hyperband_iterations=_int(
            t, "hyperbandIterations", "spec.tuner.hyperbandIterations", 1, minimum=1
        ),
        executions_per_trial=_int(
            t, "executionsPerTrial", "spec.tuner.executionsPerTrial", 1, minimum=1
        ),
        seed=_int(t, "seed", "spec.tuner.seed", 42, minimum=0),
        batch_size=_int(t, "batchSize", "spec.tuner.batchSize", 32, minimum=1),
        deterministic=deterministic,
        early_stopping=_parse_early_stopping(t),
        dtype_policy=_parse_dtype_policy(t),
        tensorboard=tensorboard,
        callbacks=_parse_callbacks(t),
    )


DTYPE_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


def _parse_dtype_policy(t: dict[str, Any]) -> str | None:
    if t.get("dtypePolicy") is None:
        return None
    policy = _str(t, "dtypePolicy", "spec.tuner.dtypePolicy", "float32")
    _one_of(policy, DTYPE_POLICIES, "spec.tuner.dtypePolicy")
    return policy


def _parse_early_stopping(t: dict[str, Any]) -> EarlyStoppingSpec | None:
    if t.get("earlyStopping") is None:
        return None
    e = _map(t, "earlyStopping", "spec.tuner.earlyStopping")
    monitor = _str(e, "monitor", "spec.tuner.earlyStopping.monitor", "val_loss")
    min_delta = e.get("minDelta", 0.0)
    if isinstance(min_delta, bool) or not isinstance(min_delta, int | float) or min_delta < 0:
        raise SpecError(
            "spec.tuner.earlyStopping.minDelta", f"{_q(min_delta)} must be a number >= 0"
        )
    mode = _str(e, "mode", "spec.tuner.earlyStopping.mode", "auto")
    _one_of(mode, ("auto", "min", "max"), "spec.tuner.earlyStopping.mode")
    if mode == "auto":  # resolved here, as for the objective
        try:
            mode = infer_direction(monitor)
        except SpecError:
            raise SpecError(
                "spec.tuner.earlyStopping.mode",
                f'cannot tell whether "{monitor}" is to be minimised or maximised; set mode: '
                "min or max",
            ) from None
    return EarlyStoppingSpec(
        monitor=monitor,
        patience=_int(e, "patience", "spec.tuner.earlyStopping.patience", 0, minimum=0),
        min_delta=float(min_delta),
        mode=mode,
    )


def _parse_callbacks(t: dict[str, Any]) -> tuple[CallbackSpec, ...]:
    raw = t.get("callbacks")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError("spec.tuner.callbacks", "must be a list of {class, args}")
    callbacks = []
    for i, item in enumerate(raw):
        field = f"spec.tuner.callbacks[{i}]"
        if not isinstance(item, dict):
            raise SpecError(field, "must be a mapping {class, args}")
        unknown = sorted(set(item) - {"class", "args"})
        if unknown:
            raise SpecError(f"{field}.{unknown[0]}", "is not a field of a callback (class, args)")
        ref = _str(item, "class", f"{field}.class", "")
        if not CALLBACK_REF.fullmatch(ref):
            raise SpecError(
                f"{field}.class",
                f'{_q(ref)} is not a class reference such as "keras.callbacks.ReduceLROnPlateau" '
                'or "pkg.module:Name"',
            )
        args = item.get("args") or {}
        if not isinstance(args, dict):
            raise SpecError(f"{field}.args", "must be a mapping of argument names to values")
        callbacks.append(CallbackSpec(ref, dict(args)))
    return tuple(callbacks)


def infer_direction(name: str) -> str:
    """The direction keras-tuner infers for a metric name (`val_loss` → min,
    `val_accuracy` → max, any Keras metric or loss by its name); SpecError when it
    cannot tell (a custom metric: say `direction: min` or `max`)."""
    base = name.removeprefix("val_").removeprefix("weighted_")
    if base in ("loss", "crossentropy", "ce") or base.endswith("_loss"):
        return "min"
    if base in ("accuracy", "acc"):
        return "max"
    from keras_tuner.src.engine.metrics_tracking import infer_metric_direction

    try:
        direction = infer_metric_direction(name)
    except Exception:  # keras-tuner raises for some names instead of returning None
        direction = None
    if direction not in DIRECTIONS:
        raise SpecError(
            "spec.tuner.objective.direction",
            f'cannot tell whether "{name}" is to be minimised or maximised; set direction: '
            "min or max",
        )
    return str(direction)


def _parse_checkpoint(c: dict[str, Any], stall_timeout: Any = None) -> CheckpointSpec:
    seconds = c.get("intervalSeconds", CheckpointSpec.interval_seconds)
    auto = seconds == CHECKPOINT_INTERVAL_AUTO
    if auto:
        seconds = CheckpointSpec.interval_seconds
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise SpecError(
            "spec.checkpoint.intervalSeconds",
            f'{_q(seconds)} must be a number >= 0 (0 = off) or "{CHECKPOINT_INTERVAL_AUTO}"',
        )
    return CheckpointSpec(
        interval_steps=_int(c, "intervalSteps", "spec.checkpoint.intervalSteps", 0, minimum=0),
        interval_seconds=float(seconds),
        auto_interval=auto,
        max_interval_seconds=_stall_timeout(stall_timeout),
        keep=_int(c, "keep", "spec.checkpoint.keep", 2, minimum=1),
        adopt=_flag(c, "adopt", "spec.checkpoint.adopt"),
    )


def _stall_timeout(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError("spec.stallTimeoutSeconds", f"{_q(value)} must be an integer >= 1")
    return float(value)


def _flag(d: dict[str, Any], key: str, field: str) -> bool:
    value = d.get(key, False)
    if not isinstance(value, bool):
        raise SpecError(field, f"{_q(value)} must be true or false")
    return value


def _map(d: dict[str, Any], key: str, field: str) -> dict[str, Any]:
    value = d.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(field, "must be a mapping")
    return value


def _str(d: dict[str, Any], key: str, field: str, default: str) -> str:
    value = d.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise SpecError(field, f"{_q(value)} must be a string")
    return value


def _int(d: dict[str, Any], key: str, field: str, default: int, minimum: int) -> int:
    value = d.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field, f"{_q(value)} must be an integer >= {minimum}")
    if value < minimum:
        raise SpecError(field, f"{value} must be >= {minimum}")
    return value


def _one_of(value: str, allowed: tuple[str, ...], field: str) -> None:
    if value not in allowed:
        raise SpecError(field, f"{_q(value)} is not one of {', '.join(allowed)}")


def _q(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
