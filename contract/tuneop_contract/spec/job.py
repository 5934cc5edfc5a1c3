"""The whole TuningJob spec: `JobSpec.from_dict` reads every field once, with the CRD's
defaults, and runs every check that needs no cluster."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from .. import reserved_env
from .checkpoint import STALL_TIMEOUT_SECONDS, Checkpoint, check_checkpoint, parse_checkpoint
from .data import DataSpec, parse_data
from .distribution import Distribution, check_distribution, parse_distribution
from .errors import SpecError
from .failure import FailurePolicy, check_failure_policy, parse_failure_policy
from .read import Doc, flag, integer, items, mapping, quoted, string, strings
from .script import Script, check_script, parse_script
from .tuner import MetricDirection, TunerSpec, parse_tuner

T = TypeVar("T")

DEFAULT_HYPERMODEL = "tuneop_trainer.examples.emg:CNNHyperModel"
"""What a spec that names neither a hypermodel nor a script searches (the trainer's sample)."""
DEFAULT_ORACLE_RESOURCES: dict[str, Any] = {"requests": {"cpu": "250m", "memory": "1Gi"}}
"""The oracle pod's resources when `spec.oracle.resources` is unset: it serves gRPC and
writes small JSON files, but imports TensorFlow and runs the script up to `search()`."""


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A TuningJob's spec, typed. The search (hypermodel, data, tuner or script), how it
    is checkpointed and distributed, and the pods' settings, whose contents (quantities,
    the pod template) the operator checks."""

    raw: Doc = dataclasses.field(default_factory=dict)
    """The spec as given (after API-server defaulting); the operator passes it to the
    trainer as is."""
    image: str = ""
    image_pull_policy: str = "IfNotPresent"
    hypermodel: str = DEFAULT_HYPERMODEL
    python_path: tuple[str, ...] = ()
    data: DataSpec = dataclasses.field(default_factory=DataSpec)
    tuner: TunerSpec = dataclasses.field(default_factory=TunerSpec)
    script: Script | None = None
    """Script mode; None in spec mode (hypermodel + data + tuner)."""
    distribution: Distribution = dataclasses.field(default_factory=Distribution)
    checkpoint: Checkpoint = dataclasses.field(default_factory=Checkpoint)
    failure_policy: FailurePolicy = dataclasses.field(default_factory=FailurePolicy)
    resources: dict[str, Any] = dataclasses.field(default_factory=dict)
    node_selector: dict[str, str] = dataclasses.field(default_factory=dict)
    tolerations: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    affinity: dict[str, Any] = dataclasses.field(default_factory=dict)
    priority_class_name: str = ""
    env: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    stall_timeout_seconds: int = STALL_TIMEOUT_SECONDS
    pending_timeout_seconds: int = 600
    stall_policy: str = "Ignore"
    """Ignore | Restart | Fail: what a Stalled pod group gets besides the condition."""
    suspend: bool = False
    ttl_seconds_after_finished: int | None = None
    termination_grace_period_seconds: int = 60
    parallel_trials: int = 1
    """Trials at once; above 1 an oracle pod and this many trial groups (keras-tuner's
    distributed tuning)."""
    oracle_resources: dict[str, Any] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_ORACLE_RESOURCES)
    )
    errors: tuple[SpecError, ...] = ()
    """What the parse refused, in the spec's order (the part of the spec a refused field
    is in keeps its defaults). The trainer stops at the first, the operator reports all."""

    @classmethod
    def from_dict(cls, spec: Any, metric_direction: MetricDirection | None = None) -> JobSpec:
        """TuningJob.spec (a mapping; None is an empty spec). `metric_direction`:
        keras-tuner's direction of a metric name, for an objective given without one
        (the trainer's; without it such a direction stays None)."""
        fields = _Fields()
        doc = spec if isinstance(spec, dict) else {}
        if spec is not None and not isinstance(spec, dict):
            fields.errors.append(SpecError("spec", "must be a mapping"))
        parsed = cls(raw=doc, **_search(doc, fields, metric_direction), **_pods(doc, fields))
        return dataclasses.replace(parsed, errors=(*fields.errors, *_rules(parsed)))

    def at_shape(self, index: int) -> JobSpec:
        """This spec with the `index`-th of `distribution.shapes` in use (0: its own);
        an index out of range (the spec changed) is the job's own shape."""
        dist = self.distribution
        shapes = dist.shapes
        index = index if 0 <= index < len(shapes) else 0
        shape = shapes[index]
        return dataclasses.replace(
            self,
            distribution=dataclasses.replace(
                dist,
                workers=shape.workers,
                gpus_per_worker=shape.gpus_per_worker,
                shape_index=index,
                own=shapes[0] if index else None,
            ),
        )

    @property
    def parallel(self) -> bool:
        """Several trials at once: an oracle pod and `parallel_trials` trial groups."""
        return self.parallel_trials > 1

    @property
    def multi_worker(self) -> bool:
        return self.distribution.workers > 1

    @property
    def script_configmap(self) -> str:
        """The ConfigMap the trainer pods mount, or "" (spec mode, or script.path)."""
        return self.script.config_map if self.script is not None else ""


class _Fields:
    """Reads the spec part by part past a refused field: its error is kept and its part
    (a section, or a top-level field) gets its default, so one parse finds every error."""

    def __init__(self) -> None:
        self.errors: list[SpecError] = []

    def read(self, parse: Callable[[], T], default: T) -> T:
        try:
            return parse()
        except SpecError as exc:
            self.errors.append(exc)
            return default


def _search(doc: Doc, fields: _Fields, metric_direction: MetricDirection | None) -> Doc:
    """What the trainer runs, read in the order it reports the first error in."""
    read = fields.read
    script = read(lambda: parse_script(doc), None)
    hypermodel = read(lambda: _hypermodel(doc), DEFAULT_HYPERMODEL)
    python_path = read(lambda: _python_path(doc), tuple[str, ...]())
    distribution = read(lambda: parse_distribution(_section(doc, "distribution")), Distribution())
    data = read(lambda: parse_data(_section(doc, "data")), DataSpec())
    tuner = read(lambda: parse_tuner(_section(doc, "tuner"), metric_direction), TunerSpec())
    stall = read(lambda: _stall_timeout(doc), STALL_TIMEOUT_SECONDS)
    parallel_trials = JobSpec.parallel_trials
    parallel = read(lambda: _count(doc, "parallelTrials", parallel_trials), parallel_trials)
    checkpoint = read(
        lambda: parse_checkpoint(_section(doc, "checkpoint"), parallel > 1, float(stall)),
        Checkpoint(),
    )
    return {
        "script": script,
        "hypermodel": hypermodel,
        "python_path": python_path,
        "distribution": distribution,
        "data": data,
        "tuner": tuner,
        "checkpoint": checkpoint,
        "stall_timeout_seconds": stall,
        "parallel_trials": parallel,
    }


def _pods(doc: Doc, fields: _Fields) -> Doc:
    """How the operator makes the pods and ends them; what is in the pod fields
    (quantities, the pod template) it checks itself."""
    read, d = fields.read, JobSpec
    pending, grace = d.pending_timeout_seconds, d.termination_grace_period_seconds
    oracle = dict(DEFAULT_ORACLE_RESOURCES)
    return {
        "image": read(lambda: _text(doc, "image"), ""),
        "image_pull_policy": read(lambda: _text(doc, "imagePullPolicy"), "") or d.image_pull_policy,
        "failure_policy": read(
            lambda: parse_failure_policy(_section(doc, "failurePolicy")), FailurePolicy()
        ),
        "resources": read(lambda: _section(doc, "resources"), Doc()),
        "node_selector": read(lambda: _section(doc, "nodeSelector"), Doc()),
        "tolerations": read(lambda: items(doc, "tolerations", "spec.tolerations"), list[Any]()),
        "affinity": read(lambda: _section(doc, "affinity"), Doc()),
        "priority_class_name": read(lambda: _text(doc, "priorityClassName"), ""),
        "env": read(lambda: _env(doc), list[Doc]()),
        "pending_timeout_seconds": read(
            lambda: _count(doc, "pendingTimeoutSeconds", pending), pending
        ),
        "stall_policy": read(lambda: _text(doc, "stallPolicy"), "") or d.stall_policy,
        "suspend": read(lambda: flag(doc, "suspend", "spec.suspend"), False),
        "ttl_seconds_after_finished": read(lambda: _ttl(doc), None),
        "termination_grace_period_seconds": read(
            lambda: _count(doc, "terminationGracePeriodSeconds", grace), grace
        ),
        "oracle_resources": read(
            lambda: (
                mapping(_section(doc, "oracle"), "resources", "spec.oracle.resources") or oracle
            ),
            oracle,
        ),
    }


def _section(doc: Doc, key: str) -> Doc:
    return mapping(doc, key, f"spec.{key}")


def _text(doc: Doc, key: str) -> str:
    return string(doc, key, f"spec.{key}", "")


def _count(doc: Doc, key: str, default: int) -> int:
    """An integer the operator bounds by the CRD only (its schema is checked first)."""
    return integer(doc, key, f"spec.{key}", default)


def _ttl(doc: Doc) -> int | None:
    if doc.get("ttlSecondsAfterFinished") is None:
        return None
    return _count(doc, "ttlSecondsAfterFinished", 0)


def _hypermodel(doc: Doc) -> str:
    hypermodel = string(doc, "hypermodel", "spec.hypermodel", DEFAULT_HYPERMODEL)
    if ":" not in hypermodel or not all(hypermodel.split(":", 1)):
        raise SpecError(
            "spec.hypermodel", f'{quoted(hypermodel)} is not of the form "pkg.module:Name"'
        )
    return hypermodel


def _python_path(doc: Doc) -> tuple[str, ...]:
    return strings(doc, "pythonPath", "spec.pythonPath", "must be a list of directory paths")


def _stall_timeout(doc: Doc) -> int:
    value = doc.get("stallTimeoutSeconds")
    if value is None:
        return STALL_TIMEOUT_SECONDS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError("spec.stallTimeoutSeconds", f"{quoted(value)} must be an integer >= 1")
    return value


def _env(doc: Doc) -> list[dict[str, Any]]:
    env = items(doc, "env", "spec.env")
    for i, var in enumerate(env):
        if not isinstance(var, dict):
            raise SpecError(f"spec.env[{i}]", "must be a mapping {name, value}")
    return env


def _rules(spec: JobSpec) -> list[SpecError]:
    """The checks across fields, on the values as parsed."""
    return [
        *_check_env(spec.env),
        *check_checkpoint(spec.checkpoint),
        *check_distribution(
            spec.distribution,
            parallel=spec.parallel,
            pending_timeout_seconds=spec.pending_timeout_seconds,
            batch_size=None if spec.script else spec.tuner.batch_size,
        ),
        *check_failure_policy(spec.failure_policy),
        *check_script(spec.script),
    ]


def _check_env(env: list[dict[str, Any]]) -> list[SpecError]:
    """The variables the operator sets on the trainer container are the contract's."""
    errors = []
    for i, var in enumerate(env):
        name = str(var.get("name", ""))
        if reserved_env(name):
            errors.append(
                SpecError(f"spec.env[{i}].name", f"{name} is reserved (set by the operator)")
            )
    return errors
