"""The pod groups of a TuningJob: what runs where.

A sequential job (`parallelTrials: 1`) has one group, its trainer pods
`<job>-worker-<i>`, whose bookkeeping is the top-level `status.attempt`. A job with
`parallelTrials: N > 1` uses keras-tuner's distributed tuning and has N + 1 groups, each
recreated on its own and counted in `status.groups`: the oracle (`<job>-oracle`, no
GPU, keras-tuner tuner id "chief") and trial groups `t0..t<N-1>` (pods
`<job>-t<g>-worker-<i>`, tuner id `tuner<g>`, `distribution.workers` pods each)."""

from __future__ import annotations

import dataclasses

import tuneop_contract as contract
from tuneop_contract.spec import JobSpec

from . import names


@dataclasses.dataclass(frozen=True)
class PodGroup:
    name: str
    """"" for the sequential group, else `names.ORACLE_GROUP` or `names.trial_group(g)`."""
    pod_names: tuple[str, ...]
    tuner_id: str | None = None
    """keras-tuner's KERASTUNER_TUNER_ID (None: sequential, no oracle server)."""
    trial_group: int | None = None
    """g of a trial group; None for the oracle and the sequential group."""

    @property
    def oracle(self) -> bool:
        return self.name == names.ORACLE_GROUP

    @property
    def gpus(self) -> bool:
        """Whether its pods get the job's GPUs (all but the oracle)."""
        return not self.oracle


def oracle_group(job: str) -> PodGroup:
    return PodGroup(names.ORACLE_GROUP, (names.oracle_pod_name(job),), contract.ORACLE_TUNER_ID)


def trial_group(job: str, spec: JobSpec, group: int) -> PodGroup:
    workers = spec.distribution.workers
    return PodGroup(
        names.trial_group(group),
        tuple(names.group_pod_name(job, group, i) for i in range(workers)),
        contract.trial_group_tuner_id(group),
        group,
    )


def sequential_group(job: str, spec: JobSpec) -> PodGroup:
    workers = spec.distribution.workers
    return PodGroup("", tuple(names.pod_name(job, i) for i in range(workers)))


def pod_groups(job: str, spec: JobSpec) -> list[PodGroup]:
    """The job's groups in creation order (the oracle first)."""
    if not spec.parallel:
        return [sequential_group(job, spec)]
    return [oracle_group(job)] + [trial_group(job, spec, g) for g in range(spec.parallel_trials)]


def group_named(job: str, spec: JobSpec, name: str) -> PodGroup | None:
    return next((g for g in pod_groups(job, spec) if g.name == name), None)
