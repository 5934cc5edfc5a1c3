"""API coordinates, child object names and labels: deterministic, so an operator restart
at any instant finds (and never duplicates) what it created before."""

from __future__ import annotations

from typing import Any

import tuneop_contract as contract

GROUP = contract.API_GROUP
VERSION = contract.CRD_VERSION
API_VERSION = contract.API_VERSION
KIND = contract.KIND
PLURAL = contract.PLURAL

FINALIZER = f"{GROUP}/cleanup"
"""kopf's finalizer on every TuningJob: the operator deletes the job's children first."""

COMPONENT = "tuneop-operator"
"""Event source component and field manager."""

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_JOB = contract.LABEL_JOB
LABEL_WORKER_INDEX = "tuneop.io/worker-index"
LABEL_ATTEMPT = "tuneop.io/attempt"
LABEL_GROUP = "tuneop.io/group"
"""With parallel trials: the pod group a pod belongs to (`ORACLE_GROUP` or `trial_group(g)`);
its `LABEL_ATTEMPT` is that group's own attempt."""
ORACLE_GROUP = "oracle"
MANAGED_BY = "tuneop"

TF_WORKER_PORT = 2222
"""Port MultiWorkerMirroredStrategy workers listen on (in TF_CONFIG)."""

CHECKPOINT_VOLUME = "checkpoints"
SPEC_VOLUME = "spec"
SPEC_KEY = "spec.yaml"
SCRIPT_VOLUME = "script"
SHM_VOLUME = "dshm"  # in-memory /dev/shm of GPU pods
"""Volume of the user's `spec.script.configMap` (mounted at tuneop_contract.SCRIPT_DIR)."""
TRAINER_CONTAINER = contract.TRAINER_CONTAINER
TRAINER_UID = 1000


def pvc_name(job: str) -> str:
    return f"{job}-ckpt"


def configmap_name(job: str) -> str:
    return f"{job}-spec"


def progress_configmap_name(job: str) -> str:
    """The ConfigMap the trainer reports progress to (the operator copies it into
    status.progress); the trainer learns the name from tuneop_contract.ENV_PROGRESS_CONFIGMAP."""
    return f"{job}-progress"


def service_account_name(job: str) -> str:
    return f"{job}-trainer"


def service_name(job: str) -> str:
    return f"{job}-workers"


def pod_name(job: str, index: int) -> str:
    return f"{job}-worker-{index}"


def probe_pod_name(job: str, index: int) -> str:
    """Probe pod `index` (decide.elastic): index >= 0, pod `index` of the job's own
    shape anywhere; index beside(i), the GPUs the own shape's pod i needs beyond the
    running pod i's, on that pod's node (`-probe-here` for the first)."""
    if index >= 0:
        return f"{job}-probe-{index}"
    worker = beside_worker(index)
    return f"{job}-probe-here" + (f"-{worker}" if worker else "")


def beside(worker: int) -> int:
    """The probe index of the GPUs beside running pod `worker`."""
    return -1 - worker


def beside_worker(index: int) -> int:
    """The running pod a probe index < 0 stands beside."""
    return -1 - index


COMPONENT_PROBE = "probe"
"""LABEL_COMPONENT of a probe pod: it holds the job's own shape's GPUs, runs nothing."""


def is_probe(pod: dict[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_COMPONENT) == COMPONENT_PROBE


def trial_group(group: int) -> str:
    """Name of trial group `group` (status.groups[].name, LABEL_GROUP)."""
    return f"t{group}"


def oracle_pod_name(job: str) -> str:
    return f"{job}-oracle"


def group_pod_name(job: str, group: int, index: int) -> str:
    """Pod `index` of trial group `group` (the job name is at most 45 characters)."""
    return f"{job}-{trial_group(group)}-worker-{index}"


def job_labels(job: str) -> dict[str, str]:
    """Labels on every child; `LABEL_JOB` is what the operator selects by."""
    return {
        LABEL_NAME: "tuneop-trainer",
        LABEL_INSTANCE: job,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_JOB: job,
    }


def job_selector(job: str) -> str:
    """The job's trainer pods: the pod watch's selector narrowed to one job."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_JOB}={job}"


TRAINER_PODS_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_JOB}"
"""What the pod watch streams: pods managed by tuneop and labelled with their TuningJob."""
COMPONENT_PROGRESS = "progress"
PROGRESS_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_PROGRESS}"
"""What the ConfigMap watch streams: the jobs' progress maps, no other ConfigMap."""
