"""A typed view of TuningJob.spec, and the checks the OpenAPI schema and CEL cannot do.

`JobSpec.from_dict` applies the same defaults as the CRD (a unit test keeps them in
sync), so the operator behaves the same when it sees an object the API server did not
default. `validate` returns `SpecError`s naming the field (`spec.env[2].name`); the
operator turns them into condition Failed/InvalidSpec and a Warning Event.

The operator never reads `spec.hypermodel`, `spec.data` or `spec.tuner` (the trainer
does, from the spec file): what it needs of the search, the trial count, comes from the
trainer's progress, which works the same for spec mode and for a `spec.script`."""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal
from typing import Any

import tuneop_contract as contract

from . import podtemplate

RESERVED_ENV_PREFIXES = ("TUNEOP_", "KERASTUNER_")
RESERVED_ENV_NAMES = (contract.ENV_TF_CONFIG,)


DEFAULT_ORACLE_RESOURCES: dict[str, Any] = {"requests": {"cpu": "250m", "memory": "1Gi"}}
"""The oracle pod's resources when `spec.oracle.resources` is unset: it serves gRPC and
writes small JSON files, but imports TensorFlow and runs the script up to `search()`."""
PARALLEL_ACCESS_MODE = "ReadWriteMany"
"""Trial groups may land on different nodes and all share the checkpoint claim."""


@dataclasses.dataclass(frozen=True)
class SpecError:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclasses.dataclass(frozen=True)
class Shape:
    """A trial's pods and GPUs: `workers` pods of `gpus_per_worker` GPUs each."""

    workers: int
    gpus_per_worker: int

    @property
    def name(self) -> str:
        """As `kubectl get tj -o wide` shows it: workers x GPUs per worker."""
        return f"{self.workers}x{self.gpus_per_worker}"

    @property
    def replicas(self) -> int:
        """The trainer's replicas (a CPU pod is one)."""
        return self.workers * max(self.gpus_per_worker, 1)


@dataclasses.dataclass(frozen=True)
class Elastic:
    """`spec.distribution.elastic`: the shapes a trial group may also run in, in order
    of preference after the job's own (`distribution.workers` x `gpusPerWorker`), and how
    long a group may stay unschedulable (or queued by Kueue) before the next one."""

    shapes: tuple[Shape, ...] = ()
    wait_seconds: int = 120


@dataclasses.dataclass(frozen=True)
class Distribution:
    strategy: str = "Auto"
    workers: int = 1
    gpus_per_worker: int = 1
    shm_size: str = "1Gi"  # in-memory /dev/shm of GPU pods; "0": none
    gpu_resource: str = podtemplate.DEFAULT_GPU_RESOURCE
    """The extended resource GPUs are counted in (limit and toleration key)."""
    elastic: Elastic | None = None
    shape_index: int = 0
    """The shape in use: 0 the job's own, i the i-th of `elastic.shapes` (status.shape)."""
    own: Shape | None = None
    """The job's own shape while another is in use (workers and gpus_per_worker are
    then the other's)."""

    @property
    def shapes(self) -> tuple[Shape, ...]:
        """The job's own shape, then the elastic ones."""
        own = self.own_shape
        return (own, *(self.elastic.shapes if self.elastic else ()))

    @property
    def own_shape(self) -> Shape:
        return self.own or Shape(self.workers, self.gpus_per_worker)

    @property
    def shape(self) -> Shape:
        """The shape in use."""
        return Shape(self.workers, self.gpus_per_worker)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    existing_claim: str = ""
    size: str = "1Gi"
    storage_class_name: str = ""
    access_modes: tuple[str, ...] = ("ReadWriteOnce",)
    reclaim_policy: str = "Retain"
    interval_steps: int = 0
    interval_seconds: int | str = 60
    """Seconds (0 = off) or contract.CHECKPOINT_INTERVAL_AUTO; the trainer applies it (any
    other value is kept as given for `validate` to name)."""
    keep: int = 2
    adopt: bool = False
    """The trainer may continue a search its volume records for another job (it checks)."""


@dataclasses.dataclass(frozen=True)
class FailurePolicy:
    max_failures: int = 3
    backoff_seconds: int = 10
    max_backoff_seconds: int = 300
    max_preemptions: int = 20
    max_trial_ooms: int = 10
    """Trials that ran out of memory (each recorded FAILED, the search going on)
    tolerated before the job fails: more means the pods are too small for this space."""

    def backoff(self, failures: int) -> int:
        """Delay before the retry that follows failure number `failures` (1-based):
        backoffSeconds doubled per earlier failure, capped at maxBackoffSeconds."""
        if failures <= 0:
            return 0
        delay = self.backoff_seconds * 2 ** min(failures - 1, 32)
        return int(min(delay, self.max_backoff_seconds))


@dataclasses.dataclass(frozen=True)
class Script:
    """`spec.script`: the user's own keras-tuner script. The operator only mounts the
    ConfigMap and checks it; the trainer resolves and runs the script."""

    config_map: str = ""
    """Name of the ConfigMap holding the script ("" with `path`)."""
    key: str = ""
    """The entry script's key in that ConfigMap; "" = resolved from the map's keys."""
    path: str = ""
    args: tuple[str, ...] = ()
    deterministic: bool = False
    continue_optimizer_state: bool = False
    """Hyperband promotions continue the optimizer state (the trainer's switch)."""
    requirements: str = ""
    """A pip requirements file: a key of the ConfigMap, or an absolute path in the pod."""

    @classmethod
    def from_dict(cls, script: dict[str, Any]) -> Script:
        config_map = script.get("configMap") or {}
        return cls(
            config_map=str(config_map.get("name") or ""),
            key=str(config_map.get("key") or ""),
            path=str(script.get("path") or ""),
            args=tuple(str(a) for a in script.get("args") or ()),
            deterministic=bool(script.get("deterministic", False)),
            continue_optimizer_state=bool(script.get("continueOptimizerState", False)),
            requirements=str(script.get("requirements") or ""),
        )


@dataclasses.dataclass(frozen=True)
class JobSpec:
    raw: dict[str, Any]
    """The spec as given (after API-server defaulting), passed to the trainer as is."""
    image: str
    image_pull_policy: str = "IfNotPresent"
    distribution: Distribution = Distribution()
    checkpoint: Checkpoint = Checkpoint()
    failure_policy: FailurePolicy = FailurePolicy()
    resources: dict[str, Any] = dataclasses.field(default_factory=dict)
    node_selector: dict[str, str] = dataclasses.field(default_factory=dict)
    tolerations: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    affinity: dict[str, Any] = dataclasses.field(default_factory=dict)
    priority_class_name: str = ""
    env: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    stall_timeout_seconds: int = 900
    pending_timeout_seconds: int = 600
    stall_policy: str = "Ignore"
    """Ignore | Restart | Fail: what a Stalled pod group gets besides the condition."""
    suspend: bool = False
    ttl_seconds_after_finished: int | None = None
    termination_grace_period_seconds: int = 60
    script: Script | None = None
    """Script mode; None in spec mode (hypermodel + data + tuner)."""
    parallel_trials: int = 1
    """Trials at once; above 1 an oracle pod and this many trial groups (keras-tuner's
    distributed tuning)."""
    oracle_resources: dict[str, Any] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_ORACLE_RESOURCES)
    )

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> JobSpec:
        dist = spec.get("distribution") or {}
        ckpt = spec.get("checkpoint") or {}
        fp = spec.get("failurePolicy") or {}
        d_dist, d_ckpt, d_fp = Distribution(), Checkpoint(), FailurePolicy()
        parallel = int(spec.get("parallelTrials", 1))
        default_modes = (PARALLEL_ACCESS_MODE,) if parallel > 1 else d_ckpt.access_modes
        oracle = spec.get("oracle") or {}
        return cls(
            raw=spec,
            image=str(spec.get("image", "")),
            image_pull_policy=spec.get("imagePullPolicy") or "IfNotPresent",
            distribution=Distribution(
                strategy=dist.get("strategy", d_dist.strategy),
                workers=int(dist.get("workers", d_dist.workers)),
                gpus_per_worker=int(dist.get("gpusPerWorker", d_dist.gpus_per_worker)),
                shm_size=str(dist.get("shmSize") or d_dist.shm_size),
                gpu_resource=str(dist.get("gpuResource") or d_dist.gpu_resource),
                elastic=_elastic(dist.get("elastic")),
            ),
            checkpoint=Checkpoint(
                existing_claim=ckpt.get("existingClaim") or "",
                size=str(ckpt.get("size") or d_ckpt.size),
                storage_class_name=ckpt.get("storageClassName") or "",
                access_modes=tuple(ckpt.get("accessModes") or default_modes),
                reclaim_policy=ckpt.get("reclaimPolicy", d_ckpt.reclaim_policy),
                interval_steps=int(ckpt.get("intervalSteps", d_ckpt.interval_steps)),
                interval_seconds=_interval(ckpt.get("intervalSeconds", d_ckpt.interval_seconds)),
                keep=int(ckpt.get("keep", d_ckpt.keep)),
                adopt=ckpt.get("adopt", d_ckpt.adopt) is True,
            ),
            failure_policy=FailurePolicy(
                max_failures=int(fp.get("maxFailures", d_fp.max_failures)),
                backoff_seconds=int(fp.get("backoffSeconds", d_fp.backoff_seconds)),
                max_backoff_seconds=int(fp.get("maxBackoffSeconds", d_fp.max_backoff_seconds)),
                max_preemptions=int(fp.get("maxPreemptions", d_fp.max_preemptions)),
                max_trial_ooms=int(fp.get("maxTrialOOMs", d_fp.max_trial_ooms)),
            ),
            resources=dict(spec.get("resources") or {}),
            node_selector=dict(spec.get("nodeSelector") or {}),
            tolerations=list(spec.get("tolerations") or []),
            affinity=dict(spec.get("affinity") or {}),
            priority_class_name=spec.get("priorityClassName") or "",
            env=list(spec.get("env") or []),
            stall_timeout_seconds=int(spec.get("stallTimeoutSeconds", 900)),
            pending_timeout_seconds=int(spec.get("pendingTimeoutSeconds", 600)),
            stall_policy=str(spec.get("stallPolicy") or "Ignore"),
            suspend=bool(spec.get("suspend", False)),
            ttl_seconds_after_finished=spec.get("ttlSecondsAfterFinished"),
            termination_grace_period_seconds=int(spec.get("terminationGracePeriodSeconds", 60)),
            script=Script.from_dict(spec["script"]) if spec.get("script") else None,
            parallel_trials=parallel,
            oracle_resources=dict(oracle.get("resources") or DEFAULT_ORACLE_RESOURCES),
        )

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


def _elastic(value: Any) -> Elastic | None:
    if not isinstance(value, dict):
        return None
    shapes = tuple(
        Shape(int(s.get("workers", 1)), int(s.get("gpusPerWorker", 1)))
        for s in value.get("shapes") or ()
        if isinstance(s, dict)
    )
    return Elastic(shapes, int(value.get("waitSeconds", Elastic.wait_seconds)))


def job_spec(job: dict[str, Any]) -> JobSpec:
    """The job's spec with the shape its status says is in use (status.shape)."""
    spec = JobSpec.from_dict(job.get("spec") or {})
    shape = ((job.get("status") or {}).get("shape") or {}).get("index")
    return spec.at_shape(shape) if isinstance(shape, int) else spec


def _interval(value: Any) -> int | str:
    """`checkpoint.intervalSeconds` as an int when it is one, else as text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return str(value)


def _interval_valid(value: int | str) -> bool:
    """What the CRD accepts: an integer >= 0 or "auto"."""
    if isinstance(value, int):
        return value >= 0
    return value == contract.CHECKPOINT_INTERVAL_AUTO


QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>[KMGTPE])i|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
"""A Kubernetes resource quantity (apimachinery's grammar, as the CRD's pattern): a
signed decimal number, then a binary suffix (Ki..Ei), a decimal one (n, u, m, k, M..E)
or an exponent (e3)."""
_BINARY = {"K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(value: Any) -> Decimal | None:
    """The value of a resource quantity (`2Gi`, `500m`, `1e3`, or a YAML number), None
    if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = Decimal(value)
        return number if number.is_finite() else None
    match = QUANTITY.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    try:
        number = Decimal(match["number"])
        if match["binary"]:
            return number * Decimal(1024) ** _BINARY[match["binary"]]
        if match["decimal"]:
            return number.scaleb(_DECIMAL[match["decimal"]])
        return number.scaleb(int(match["exponent"] or 0))
    except ArithmeticError:
        return None


def validate(spec: JobSpec) -> list[SpecError]:
    """Checks the schema cannot express; each error names the offending field."""
    errors: list[SpecError] = []
    if not spec.image.strip():
        errors.append(
            SpecError(
                "spec.image",
                "unset, and the operator has no default trainer image "
                "(chart value trainer.image, TUNEOP_OPERATOR_TRAINER_IMAGE)",
            )
        )
    for i, var in enumerate(spec.env):
        name = str(var.get("name", ""))
        if name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES):
            errors.append(
                SpecError(f"spec.env[{i}].name", f"{name} is reserved (set by the operator)")
            )
    errors += _check_resources(spec)
    errors += _check_checkpoint(spec)
    if spec.distribution.workers > 1 and spec.distribution.strategy == "Mirrored":
        errors.append(
            SpecError(
                "spec.distribution.strategy",
                "Mirrored runs in one pod; workers > 1 needs MultiWorkerMirrored or Auto",
            )
        )
    # spec.template (checked on the raw spec: it is laid over the pods as given)
    errors += [SpecError(f, m) for f, m in podtemplate.check(spec.raw.get("template"))]
    errors += _check_access_modes(spec)
    errors += _check_elastic(spec)
    fp = spec.failure_policy
    if fp.max_backoff_seconds < fp.backoff_seconds:
        errors.append(
            SpecError("spec.failurePolicy.maxBackoffSeconds", "must be >= backoffSeconds")
        )
    # Only spec.script.configMap is mounted there: a path under it names nothing.
    if spec.script is not None and _under(spec.script.path, contract.SCRIPT_DIR):
        errors.append(
            SpecError(
                "spec.script.path",
                f"{contract.SCRIPT_DIR} is where spec.script.configMap is mounted; "
                "use spec.script.configMap for a script in a ConfigMap",
            )
        )
    return errors


def _check_elastic(spec: JobSpec) -> list[SpecError]:
    """Elastic shapes: a sequential job only, each a different shape that divides the
    search's global batch (spec mode; a script's batch the trainer checks)."""
    dist = spec.distribution
    if dist.elastic is None:
        return []
    field = "spec.distribution.elastic"
    if spec.parallel:
        return [SpecError(field, "not with parallelTrials > 1 (each trial group's shape)")]
    errors = []
    if dist.elastic.wait_seconds >= spec.pending_timeout_seconds:
        errors.append(
            SpecError(
                f"{field}.waitSeconds",
                f"{dist.elastic.wait_seconds} must be below pendingTimeoutSeconds "
                f"({spec.pending_timeout_seconds}): a group stalls before it can bend",
            )
        )
    raw_tuner = spec.raw.get("tuner")
    tuner: dict[str, Any] = raw_tuner if isinstance(raw_tuner, dict) else {}
    batch = None if spec.script else int(tuner.get("batchSize", 32))
    own = dist.shapes[0]
    for i, shape in enumerate(dist.shapes[1:]):
        where = f"{field}.shapes[{i}]"
        if shape == own or shape in dist.shapes[1 : i + 1]:
            errors.append(SpecError(where, f"{shape.name} is already a shape of the job"))
        elif (shape.gpus_per_worker == 0) != (own.gpus_per_worker == 0):
            errors.append(SpecError(where, "GPUs or none, as distribution.gpusPerWorker"))
        elif shape.workers > 1 and dist.strategy == "Mirrored":
            errors.append(SpecError(where, "Mirrored runs in one pod: workers must be 1"))
        elif shape.workers > 1 and "ReadWriteOncePod" in spec.checkpoint.access_modes:
            errors.append(SpecError(where, "ReadWriteOncePod allows one pod: workers must be 1"))
        elif batch is not None and batch % shape.replicas:
            errors.append(
                SpecError(
                    where,
                    f"{shape.name} is {shape.replicas} replicas, which do not divide "
                    f"spec.tuner.batchSize {batch} (the global batch is kept on every shape)",
                )
            )
    return errors


def _check_resources(spec: JobSpec) -> list[SpecError]:
    """`spec.resources`: quantities, no GPU resource (gpusPerWorker sets it), requests
    within limits."""
    errors: list[SpecError] = []
    requests = spec.resources.get("requests") or {}
    limits = spec.resources.get("limits") or {}
    for section_name, section in (("requests", requests), ("limits", limits)):
        for key, value in section.items():
            field = f"spec.resources.{section_name}.{key}"
            if key in (spec.distribution.gpu_resource, podtemplate.DEFAULT_GPU_RESOURCE):
                errors.append(SpecError(field, "set spec.distribution.gpusPerWorker instead"))
            elif parse_quantity(value) is None:
                errors.append(SpecError(field, f"{value!r} is not a valid quantity"))
    for key, req in requests.items():
        if key in limits:
            low, high = parse_quantity(req), parse_quantity(limits[key])
            if low is not None and high is not None and low > high:
                errors.append(
                    SpecError(
                        f"spec.resources.requests.{key}",
                        f"{req} exceeds spec.resources.limits.{key} ({limits[key]})",
                    )
                )
    return errors


def _check_checkpoint(spec: JobSpec) -> list[SpecError]:
    """`spec.checkpoint`: an existing claim is never deleted, the interval, the size."""
    errors: list[SpecError] = []
    if spec.checkpoint.existing_claim and spec.checkpoint.reclaim_policy == "Delete":
        errors.append(
            SpecError(
                "spec.checkpoint.reclaimPolicy",
                "Delete cannot be used with existingClaim (an existing claim is never deleted)",
            )
        )
    if not _interval_valid(spec.checkpoint.interval_seconds):
        errors.append(
            SpecError(
                "spec.checkpoint.intervalSeconds",
                f"{spec.checkpoint.interval_seconds!r} must be an integer >= 0 (0 = off) or "
                f'"{contract.CHECKPOINT_INTERVAL_AUTO}"',
            )
        )
    if not spec.checkpoint.existing_claim and parse_quantity(spec.checkpoint.size) is None:
        errors.append(SpecError("spec.checkpoint.size", f"{spec.checkpoint.size!r} is invalid"))
    return errors


def _check_access_modes(spec: JobSpec) -> list[SpecError]:
    """`spec.checkpoint.accessModes` against the pods that share the claim."""
    errors: list[SpecError] = []
    modes = spec.checkpoint.access_modes
    if spec.parallel and not spec.checkpoint.existing_claim and PARALLEL_ACCESS_MODE not in modes:
        errors.append(
            SpecError(
                "spec.checkpoint.accessModes",
                f"parallelTrials > 1 needs {PARALLEL_ACCESS_MODE} (trial groups on different "
                "nodes share the claim); leave accessModes unset for the default",
            )
        )
    if "ReadWriteOncePod" in modes and (spec.parallel or spec.multi_worker):
        errors.append(
            SpecError(
                "spec.checkpoint.accessModes",
                "ReadWriteOncePod allows one pod only: not with distribution.workers > 1 "
                "or parallelTrials > 1",
            )
        )
    return errors


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def check_script_configmap(spec: JobSpec, configmap: dict[str, Any]) -> SpecError | None:
    """Whether the ConfigMap named by `spec.script.configMap` (as read from the API)
    holds the entry script: the given key, or without a key its only key or
    `DEFAULT_SCRIPT_KEY` (the rule the trainer resolves by). None = fine, or not
    script.configMap mode. A ConfigMap that does not exist is the caller's case (it
    waits for it)."""
    if spec.script is None or not spec.script.config_map:
        return None
    name, key = spec.script.config_map, spec.script.key
    # both are mounted as files: `kubectl create configmap --from-file` puts a file
    # that is not UTF-8 into binaryData
    every = sorted({*(configmap.get("data") or {}), *(configmap.get("binaryData") or {})})
    have = ", ".join(every) or "none"
    requirements = spec.script.requirements
    if requirements and not requirements.startswith("/") and requirements not in every:
        return SpecError(
            "spec.script.requirements",
            f"ConfigMap {name!r} has no key {requirements!r} (it has: {have})",
        )
    keys = [k for k in every if k != requirements]  # the entry script is not the requirements
    if not keys:
        return SpecError("spec.script.configMap", f"ConfigMap {name!r} is empty (no script)")
    if key:
        if key in keys:
            return None
        return SpecError(
            "spec.script.configMap.key", f"ConfigMap {name!r} has no key {key!r} (it has: {have})"
        )
    if len(keys) == 1 or contract.DEFAULT_SCRIPT_KEY in keys:
        return None
    return SpecError(
        "spec.script.configMap.key",
        f"unset, and ConfigMap {name!r} has {len(every)} keys ({have}) but no "
        f"{contract.DEFAULT_SCRIPT_KEY!r}: set spec.script.configMap.key to the entry script",
    )


def check_existing_claim(spec: JobSpec, claim: dict[str, Any]) -> SpecError | None:
    """Whether `spec.checkpoint.existingClaim` (as read from the API) can be shared by
    every pod of the job: with parallel trials it must be ReadWriteMany (trial groups
    may land on different nodes). None = fine, or not applicable."""
    if not spec.parallel or not spec.checkpoint.existing_claim:
        return None
    claim_spec = claim.get("spec") if isinstance(claim.get("spec"), dict) else {}
    modes = [str(m) for m in (claim_spec or {}).get("accessModes") or []]
    if PARALLEL_ACCESS_MODE in modes:
        return None
    return SpecError(
        "spec.checkpoint.existingClaim",
        f"claim {spec.checkpoint.existing_claim!r} has access modes {modes or 'none'}; "
        f"parallelTrials > 1 needs {PARALLEL_ACCESS_MODE} (trial groups on different nodes "
        "share it): use a ReadWriteMany claim, or leave existingClaim unset",
    )
