"""Pure builders of a TuningJob's trainer pods: `dict` in, `dict` out, no API calls.
Each pod of a pod group (the sequential group, or a parallel job's oracle and trial
groups) with its environment (the contract's variables, TF_CONFIG, keras-tuner's
distributed tuning), resources, volumes and restricted security, then `spec.template`
laid over it (render.overlay). Unit-tested in tests/unit/test_operator_builders.py."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
from typing import Any

import tuneop_contract as contract
from tuneop_contract.spec import JobSpec

from ..api import names, queue
from ..api import status as st
from ..api.groups import PodGroup, sequential_group
from . import children, overlay

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class PodSettings:
    """The operator's settings every trainer pod is built with (run.config): its
    trainer's metrics port, the uid it runs as, the steady progress interval."""

    metrics_port: int = contract.DEFAULT_METRICS_PORT
    uid: int = names.TRAINER_UID
    progress_interval: float = contract.DEFAULT_PROGRESS_INTERVAL_SECONDS


def pod_host(job: Obj, pod: str) -> str:
    """DNS name of the job's pod `pod` behind the headless Service."""
    job_name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    return f"{pod}.{names.service_name(job_name)}.{ns}.svc"


def worker_hosts(job: Obj, pod_names: tuple[str, ...]) -> list[str]:
    return [f"{pod_host(job, pod)}:{names.TF_WORKER_PORT}" for pod in pod_names]


def build_tf_config(job: Obj, pod_names: tuple[str, ...], index: int) -> str:
    """TF_CONFIG of worker `index` of the pod group `pod_names` (a trial group of a
    parallel job is a cluster of its own) for MultiWorkerMirroredStrategy."""
    return json.dumps(
        {
            "cluster": {"worker": worker_hosts(job, pod_names)},
            "task": {"type": "worker", "index": index},
        },
        sort_keys=True,
    )


def _field_env(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def progress_report_seconds(spec: JobSpec, configured: float) -> float:
    """How often the trainer writes steady progress: the operator's configured interval
    (its API server budget), shorter for a job whose stallTimeoutSeconds is short, so a
    progressing job is never judged stalled for a report it has not sent yet."""
    return min(configured, spec.stall_timeout_seconds / 4)


def build_env(
    job: Obj,
    spec: JobSpec,
    index: int,
    metrics_port: int,
    group: PodGroup | None = None,
    now: dt.datetime | None = None,
    progress_interval: float = contract.DEFAULT_PROGRESS_INTERVAL_SECONDS,
) -> list[Obj]:
    # what the job's status tells each (re)created trainer: the mean time between
    # disruptions its losses give, the trials to record FAILED instead of retrying them
    status = job.get("status") or {}
    mtbf = st.mtbf_seconds(status, spec.parallel_trials, now or dt.datetime.now(dt.UTC))
    failed = st.oom_trials(status)
    env: list[Obj] = [
        {"name": contract.ENV_JOB_NAME, "value": job["metadata"]["name"]},
        {"name": contract.ENV_JOB_NAMESPACE, "value": job["metadata"]["namespace"]},
        {"name": contract.ENV_JOB_UID, "value": str(job["metadata"].get("uid") or "")},
        {
            "name": contract.ENV_PROGRESS_CONFIGMAP,
            "value": names.progress_configmap_name(job["metadata"]["name"]),
        },
        _field_env(contract.ENV_POD_NAME, "metadata.name"),
        {"name": contract.ENV_METRICS_PORT, "value": str(metrics_port)},
        {
            "name": contract.ENV_PROGRESS_INTERVAL,
            "value": f"{progress_report_seconds(spec, progress_interval):g}",
        },
        {"name": contract.ENV_WORKER_INDEX, "value": str(index)},
        {"name": contract.ENV_CHECKPOINT_DIR, "value": contract.DEFAULT_CHECKPOINT_DIR},
        {"name": contract.ENV_SPEC_FILE, "value": contract.DEFAULT_SPEC_FILE},
        {"name": contract.ENV_MTBF_SECONDS, "value": str(round(mtbf))},
    ]
    if spec.script is not None and not _template_working_dir(spec):
        # the script's relative writes (a saved model, a CSV log) kept on the claim
        workdir = f"{contract.DEFAULT_CHECKPOINT_DIR}/{contract.OUTPUTS_DIR}"
        env.append({"name": contract.ENV_SCRIPT_WORKDIR, "value": workdir})
    if failed:
        value = contract.format_failed_trials(dict.fromkeys(failed, contract.FAILED_REASON_OOM))
        env.append({"name": contract.ENV_FAILED_TRIALS, "value": value})
    if group is not None and group.tuner_id is not None:
        # keras-tuner's own distributed tuning: the oracle serves, trial groups ask it
        oracle = names.oracle_pod_name(job["metadata"]["name"])
        env += [
            {"name": contract.ENV_TUNER_ID, "value": group.tuner_id},
            {"name": contract.ENV_ORACLE_IP, "value": pod_host(job, oracle)},
            {"name": contract.ENV_ORACLE_PORT, "value": str(contract.DEFAULT_ORACLE_PORT)},
            {"name": contract.ENV_TRIAL_GROUPS, "value": str(spec.parallel_trials)},
        ]
    group = group or sequential_group(job["metadata"]["name"], spec)
    if spec.multi_worker and group.gpus:
        env.append(
            {"name": contract.ENV_TF_CONFIG, "value": build_tf_config(job, group.pod_names, index)}
        )
    return env + [dict(var) for var in spec.env]


def _template_working_dir(spec: JobSpec) -> bool:
    """The job's pod template gives the trainer container a workingDir of its own."""
    template = spec.raw.get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    return any(c.get("name") == names.TRAINER_CONTAINER and c.get("workingDir") for c in containers)


def build_resources(spec: JobSpec, group: PodGroup | None = None) -> Obj:
    if group is not None and not group.gpus:
        return {k: dict(v) for k, v in spec.oracle_resources.items() if v}
    requests = dict(spec.resources.get("requests") or {})
    limits = dict(spec.resources.get("limits") or {})
    gpus = spec.distribution.gpus_per_worker
    if gpus > 0:
        limits[spec.distribution.gpu_resource] = gpus
    out: Obj = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def build_pod(
    job: Obj,
    spec: JobSpec,
    index: int,
    attempt: int,
    *,
    metrics_port: int = contract.DEFAULT_METRICS_PORT,
    uid: int = names.TRAINER_UID,
    group: PodGroup | None = None,
    now: dt.datetime | None = None,
    progress_interval: float = contract.DEFAULT_PROGRESS_INTERVAL_SECONDS,
) -> Obj:
    """Trainer pod `index` of pod group `attempt`: restricted pod security, fsGroup for
    the volume, GPU limits + toleration, the grace period the trainer needs to write its
    checkpoint, restartPolicy Never (the operator decides about restarts), an in-memory
    /dev/shm of `distribution.shmSize` for GPU pods, then `spec.template` laid over it
    (overlay.apply). In script
    mode with `spec.script.configMap` the user's ConfigMap is mounted too; the command
    is the same in both modes (the trainer reads `spec.script` from the spec file).
    `group` (default: the sequential one) names the pod; the oracle of a parallel job
    gets no GPU, the oracle's resources and port, and a DNS name. `now` (default: the
    current time) dates the MTBF estimate passed in TUNEOP_MTBF_SECONDS;
    `progress_interval`: the operator's configured steady progress interval
    (progress_report_seconds)."""
    group = group or sequential_group(job["metadata"]["name"], spec)
    pod_name = group.pod_names[index]
    container = _trainer_container(job, spec, index, group, metrics_port, now, progress_interval)
    pod_spec = _pod_spec(job, spec, group, container, uid)
    _add_volumes(spec, group, container, pod_spec)
    _add_placement(job, spec, pod_name, pod_spec)
    labels, annotations = _pod_metadata(job, group, index, attempt)
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": children.child_meta(job, pod_name, extra=labels),
        "spec": pod_spec,
    }
    if annotations:
        pod["metadata"]["annotations"] = annotations
    return overlay.apply(pod, spec)  # spec.template, over what the operator owns


def _trainer_container(
    job: Obj,
    spec: JobSpec,
    index: int,
    group: PodGroup,
    metrics_port: int,
    now: dt.datetime | None,
    progress_interval: float,
) -> Obj:
    """The pod's one container: the trainer image running `tuneop_trainer run` on the
    spec file and the checkpoint volume, its ports, resources and restricted context."""
    spec_dir = contract.DEFAULT_SPEC_FILE.rsplit("/", 1)[0]
    container: Obj = {
        "name": names.TRAINER_CONTAINER,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": [
            "python",
            "-m",
            "tuneop_trainer",
            "run",
            "--spec",
            contract.DEFAULT_SPEC_FILE,
            "--dir",
            contract.DEFAULT_CHECKPOINT_DIR,
        ],
        "env": build_env(job, spec, index, metrics_port, group, now, progress_interval),
        "ports": [{"name": "metrics", "containerPort": metrics_port}],
        "resources": build_resources(spec, group),
        "volumeMounts": [
            {"name": names.CHECKPOINT_VOLUME, "mountPath": contract.DEFAULT_CHECKPOINT_DIR},
            {"name": names.SPEC_VOLUME, "mountPath": spec_dir, "readOnly": True},
        ],
        "terminationMessagePath": contract.TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
        },
    }
    if spec.multi_worker and group.gpus:
        container["ports"].append({"name": "tf-worker", "containerPort": names.TF_WORKER_PORT})
    if group.oracle:
        container["ports"].append({"name": "oracle", "containerPort": contract.DEFAULT_ORACLE_PORT})
    return container


def _pod_spec(job: Obj, spec: JobSpec, group: PodGroup, container: Obj, uid: int) -> Obj:
    """What every trainer pod has: the trainer's ServiceAccount, restartPolicy Never,
    the grace period, a restricted pod context, the tolerations (the GPU one for pods
    with GPUs), the checkpoint claim and the spec file."""
    job_name = job["metadata"]["name"]
    gpu_toleration = {
        "key": spec.distribution.gpu_resource,
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    tolerations: list[Obj] = [
        *([gpu_toleration] if group.gpus else []),
        *[dict(t) for t in spec.tolerations],
    ]
    return {
        "restartPolicy": "Never",
        "serviceAccountName": names.service_account_name(job_name),
        "automountServiceAccountToken": True,
        "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "fsGroup": uid,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "tolerations": tolerations,
        "volumes": [
            {
                "name": names.CHECKPOINT_VOLUME,
                "persistentVolumeClaim": {"claimName": children.claim_name(job, spec)},
            },
            {
                "name": names.SPEC_VOLUME,
                "configMap": {"name": names.configmap_name(job_name)},
            },
        ],
    }


def _add_volumes(spec: JobSpec, group: PodGroup, container: Obj, pod_spec: Obj) -> None:
    """The user's script ConfigMap (script mode) and the in-memory /dev/shm of GPU pods."""
    if spec.script_configmap:
        # the whole map, read-only: the trainer resolves the entry script in it
        container["volumeMounts"].append(
            {"name": names.SCRIPT_VOLUME, "mountPath": contract.SCRIPT_DIR, "readOnly": True}
        )
        pod_spec["volumes"].append(
            {"name": names.SCRIPT_VOLUME, "configMap": {"name": spec.script_configmap}}
        )
    gpus = group.gpus and spec.distribution.gpus_per_worker > 0
    shm = spec.distribution.shm_size
    if gpus and shm not in ("0", ""):
        # NCCL all-reduces through /dev/shm; runtimes give containers 64 MiB.
        container["volumeMounts"].append({"name": names.SHM_VOLUME, "mountPath": "/dev/shm"})
        pod_spec["volumes"].append(
            {"name": names.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm}}
        )


def _add_placement(job: Obj, spec: JobSpec, pod_name: str, pod_spec: Obj) -> None:
    """The job's node selector, affinity and priority class; a DNS name for the pods of
    multi-worker and parallel jobs."""
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.affinity:
        pod_spec["affinity"] = spec.affinity
    if spec.priority_class_name:
        pod_spec["priorityClassName"] = spec.priority_class_name
    if spec.multi_worker or spec.parallel:
        # a DNS name behind the headless Service: TF_CONFIG peers, the oracle's address
        pod_spec["hostname"] = pod_name
        pod_spec["subdomain"] = names.service_name(job["metadata"]["name"])


def build_probe(job: Obj, spec: JobSpec, index: int, node: str = "", **settings: Any) -> Obj:
    """Probe pod `index` (names.probe_pod_name) of the job's own shape (`spec`: the
    job's, in any shape): index >= 0, placed and sized as that shape's trainer pod
    `index` (GPUs, requests, node selector, affinity, tolerations, priority,
    spec.template); index < 0, beside a running pod: on `node` (that pod's) with only
    the GPUs the own shape's pod needs beyond the running pod's (its CPU and memory are
    freed with it). It mounts nothing and only sleeps; once scheduled, it holds them
    (decide.elastic)."""
    name = job["metadata"]["name"]
    own = spec.at_shape(0)
    workers = own.distribution.workers
    if index < 0:
        extra = own.distribution.gpus_per_worker - spec.distribution.gpus_per_worker
        own = dataclasses.replace(
            own, distribution=dataclasses.replace(own.distribution, gpus_per_worker=extra)
        )
    pod_names = [names.probe_pod_name(name, names.beside(i)) for i in range(workers)]
    pod_names += [names.probe_pod_name(name, i) for i in range(workers)]
    position = names.beside_worker(index) if index < 0 else workers + index
    pod = build_pod(job, own, position, 0, group=PodGroup("", tuple(pod_names)), **settings)
    if node:
        _pin(pod["spec"], node)
    labels = pod["metadata"]["labels"]
    labels[names.LABEL_COMPONENT] = names.COMPONENT_PROBE
    labels.pop(names.LABEL_ATTEMPT, None)
    labels.pop(names.LABEL_WORKER_INDEX, None)  # no worker: the position in its group
    _queue_probe(job, pod, settings.get("now"))
    pod_spec = pod["spec"]
    pod_spec["terminationGracePeriodSeconds"] = 0
    pod_spec["automountServiceAccountToken"] = False
    pod_spec["volumes"] = []
    if index < 0:
        gpus = {own.distribution.gpu_resource: str(own.distribution.gpus_per_worker)}
        pod_spec["containers"][0]["resources"] = {"limits": gpus, "requests": dict(gpus)}
    pod_spec.pop("hostname", None)
    pod_spec.pop("subdomain", None)
    for container in pod_spec["containers"]:
        container.update(command=["sleep", "infinity"], args=[], env=[], volumeMounts=[])
        for key in ("ports", "readinessProbe", "livenessProbe", "startupProbe", "envFrom"):
            container.pop(key, None)
    pod_spec.pop("initContainers", None)
    return pod


def _queue_probe(job: Obj, pod: Obj, now: dt.datetime | None) -> None:
    """A queued job's probe is a Kueue pod group of its own (one pod), named for the
    moment it is made: Kueue admits it only with the quota it asks for, and never runs
    pods under a finished group's name again (an ended probe is made anew)."""
    if not queue.queue_name(job):
        return
    made = int((now or dt.datetime.now(dt.UTC)).timestamp() * 1000)
    labels, annotations = queue.pod_metadata(job, f"probe-{made}", 0, 1)
    pod["metadata"]["labels"].update(labels)
    pod["metadata"].setdefault("annotations", {}).update(annotations)


def _pin(pod_spec: Obj, node: str) -> None:
    """Only `node`: a metadata.name field term ANDed into every required node selector
    term (terms are ORed), as a DaemonSet's pods are pinned."""
    affinity = pod_spec["affinity"] = copy.deepcopy(pod_spec.get("affinity") or {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    field = {"key": "metadata.name", "operator": "In", "values": [node]}
    for term in terms:
        term.setdefault("matchFields", []).append(field)


def _pod_metadata(job: Obj, group: PodGroup, index: int, attempt: int) -> tuple[Obj, Obj]:
    """(labels beyond the job's, annotations) of a pod: its role, worker index, pod
    group attempt and group, and Kueue's pod group when the job is queued."""
    labels = {
        names.LABEL_COMPONENT: "oracle" if group.oracle else "trainer",
        names.LABEL_WORKER_INDEX: str(index),
        names.LABEL_ATTEMPT: str(attempt),
    }
    if group.name:
        labels[names.LABEL_GROUP] = group.name
    queue_labels, queue_annotations = queue.pod_metadata(
        job, group.name, attempt, len(group.pod_names)
    )
    labels.update(queue_labels)
    return labels, queue_annotations
