"""`spec.distribution`: the trainer's strategy and the shape of a trial's pods (workers x
GPUs per worker), and the other shapes it may run in (`elastic`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .errors import SpecError
from .read import Doc, integer, items, mapping, one_of, string

STRATEGIES = ("Auto", "Mirrored", "MultiWorkerMirrored")
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource GPUs are counted in unless `gpuResource` names another."""


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
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    """The extended resource the GPUs are counted in (limit and toleration key)."""
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


def parse_distribution(d: Doc) -> Distribution:
    field = "spec.distribution"
    strategy = string(d, "strategy", f"{field}.strategy", Distribution.strategy)
    one_of(strategy, STRATEGIES, f"{field}.strategy")
    workers = integer(d, "workers", f"{field}.workers", Distribution.workers, minimum=1)
    gpus = integer(d, "gpusPerWorker", f"{field}.gpusPerWorker", Distribution.gpus_per_worker)
    shm_size = string(d, "shmSize", f"{field}.shmSize", "") or Distribution.shm_size
    gpu_resource = string(d, "gpuResource", f"{field}.gpuResource", "") or DEFAULT_GPU_RESOURCE
    return Distribution(strategy, workers, gpus, shm_size, gpu_resource, _elastic(d))


def _elastic(d: Doc) -> Elastic | None:
    if d.get("elastic") is None:
        return None
    field = "spec.distribution.elastic"
    e = mapping(d, "elastic", field)
    shapes = items(e, "shapes", f"{field}.shapes")
    return Elastic(
        tuple(_shape(s, f"{field}.shapes[{i}]") for i, s in enumerate(shapes)),
        integer(e, "waitSeconds", f"{field}.waitSeconds", Elastic.wait_seconds),
    )


def _shape(s: Any, field: str) -> Shape:
    if not isinstance(s, dict):
        raise SpecError(field, "must be a mapping")
    return Shape(
        integer(s, "workers", f"{field}.workers", 1),
        integer(s, "gpusPerWorker", f"{field}.gpusPerWorker", 1),
    )


def check_distribution(
    dist: Distribution, *, parallel: bool, pending_timeout_seconds: int, batch_size: int | None
) -> list[SpecError]:
    """One pod with Mirrored, and the elastic shapes (`batch_size`: the global batch in
    spec mode, which every shape keeps; None for a script, whose batch the trainer checks
    on resume)."""
    errors = []
    if dist.workers > 1 and dist.strategy == "Mirrored":
        errors.append(
            SpecError(
                "spec.distribution.strategy",
                "Mirrored runs in one pod; workers > 1 needs MultiWorkerMirrored or Auto",
            )
        )
    return errors + _check_elastic(dist, parallel, pending_timeout_seconds, batch_size)


def _check_elastic(
    dist: Distribution, parallel: bool, pending_timeout_seconds: int, batch_size: int | None
) -> list[SpecError]:
    """Elastic shapes: a sequential job only, each a different shape that divides the
    search's global batch. (Access modes are the operator's: tuneop.api.spec.)"""
    if dist.elastic is None:
        return []
    field = "spec.distribution.elastic"
    if parallel:
        return [SpecError(field, "not with parallelTrials > 1 (each trial group's shape)")]
    errors = []
    if dist.elastic.wait_seconds >= pending_timeout_seconds:
        errors.append(
            SpecError(
                f"{field}.waitSeconds",
                f"{dist.elastic.wait_seconds} must be below pendingTimeoutSeconds "
                f"({pending_timeout_seconds}): a group stalls before it can bend",
            )
        )
    own = dist.shapes[0]
    for i, shape in enumerate(dist.shapes[1:]):
        where = f"{field}.shapes[{i}]"
        if shape == own or shape in dist.shapes[1 : i + 1]:
            errors.append(SpecError(where, f"{shape.name} is already a shape of the job"))
        elif (shape.gpus_per_worker == 0) != (own.gpus_per_worker == 0):
            errors.append(SpecError(where, "GPUs or none, as distribution.gpusPerWorker"))
        elif shape.workers > 1 and dist.strategy == "Mirrored":
            errors.append(SpecError(where, "Mirrored runs in one pod: workers must be 1"))
        elif batch_size is not None and batch_size % shape.replicas:
            errors.append(
                SpecError(
                    where,
                    f"{shape.name} is {shape.replicas} replicas, which do not divide "
                    f"spec.tuner.batchSize {batch_size} (the global batch is kept on every shape)",
                )
            )
    return errors
