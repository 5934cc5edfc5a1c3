"""Pure builders of a TuningJob's children other than its pods: `dict` in, `dict` out,
no API calls. The checkpoint claim, the spec ConfigMap the trainer reads, the progress
ConfigMap it reports to, its ServiceAccount with a Role allowed that one map, and the
headless Service of multi-worker and parallel jobs.

Every child is named deterministically (api.names), carries the job labels and an owner
reference to the TuningJob (except a retained checkpoint claim, which must outlive the
job). Unit-tested in tests/unit/test_operator_builders.py."""

from __future__ import annotations

from typing import Any

import tuneop_contract as contract
import yaml
from tuneop_contract.spec import JobSpec

from ..api import names, owners

Obj = dict[str, Any]


def child_meta(job: Obj, name: str, *, owned: bool = True, extra: Obj | None = None) -> Obj:
    job_name = job["metadata"]["name"]
    meta: Obj = {
        "name": name,
        "namespace": job["metadata"]["namespace"],
        "labels": {**names.job_labels(job_name), **(extra or {})},
    }
    if owned:
        meta["ownerReferences"] = [owners.owner_reference(job)]
    return meta


def build_pvc(job: Obj, spec: JobSpec) -> Obj | None:
    """The checkpoint claim, or None when spec.checkpoint.existingClaim is used. Owned by
    the job (deleted with it) only with reclaimPolicy Delete."""
    ckpt = spec.checkpoint
    if ckpt.existing_claim:
        return None
    pvc_spec: Obj = {
        "accessModes": list(ckpt.access_modes),
        "resources": {"requests": {"storage": ckpt.size}},
    }
    if ckpt.storage_class_name:
        pvc_spec["storageClassName"] = ckpt.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": child_meta(
            job,
            names.pvc_name(job["metadata"]["name"]),
            owned=ckpt.reclaim_policy == "Delete",
            extra={names.LABEL_COMPONENT: "checkpoint"},
        ),
        "spec": pvc_spec,
    }


def claim_name(job: Obj, spec: JobSpec) -> str:
    return spec.checkpoint.existing_claim or names.pvc_name(job["metadata"]["name"])


def build_configmap(job: Obj, spec: JobSpec) -> Obj:
    """The spec file the trainer reads (`--spec /etc/tuneop/spec.yaml`)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_meta(job, names.configmap_name(job["metadata"]["name"])),
        "data": {names.SPEC_KEY: yaml.safe_dump(spec.raw, sort_keys=True)},
    }


def build_progress_configmap(job: Obj) -> Obj:
    """Where the trainer reports its progress record (tuneop_contract.PROGRESS_KEY), so
    its token never needs write access to the TuningJob. Created empty, and emptied
    again before each pod group (apply replaces it): what it holds is always about the
    group that runs now."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_meta(
            job,
            names.progress_configmap_name(job["metadata"]["name"]),
            extra={names.LABEL_COMPONENT: names.COMPONENT_PROGRESS},
        ),
        "data": {},
    }


def build_service_account(job: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": child_meta(job, names.service_account_name(job["metadata"]["name"])),
    }


TRAINER_RULE: dict[str, list[str]] = {
    "apiGroups": [""],
    "resources": ["configmaps"],
    "verbs": ["get", "patch"],
}
"""The trainer Role's one rule, without its resourceNames (the operator must hold these
verbs itself to grant them: RBAC's escalation check)."""


def build_role(job: Obj) -> Obj:
    """Least privilege for the trainer: get/patch its job's progress ConfigMap, nothing
    else (no access to the TuningJob: its status is the operator's)."""
    job_name = job["metadata"]["name"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": child_meta(job, names.service_account_name(job_name)),
        "rules": [
            {
                **{key: list(value) for key, value in TRAINER_RULE.items()},
                "resourceNames": [names.progress_configmap_name(job_name)],
            }
        ],
    }


def build_role_binding(job: Obj) -> Obj:
    sa = names.service_account_name(job["metadata"]["name"])
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": child_meta(job, sa),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
        "subjects": [
            {"kind": "ServiceAccount", "name": sa, "namespace": job["metadata"]["namespace"]}
        ],
    }


def build_service(job: Obj) -> Obj:
    """Headless Service giving workers stable DNS names (several workers only)."""
    job_name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_meta(job, names.service_name(job_name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {names.LABEL_JOB: job_name},
            "ports": [
                {"name": "tf-worker", "port": names.TF_WORKER_PORT},
                {"name": "oracle", "port": contract.DEFAULT_ORACLE_PORT},
            ],
        },
    }


def build_children(job: Obj, spec: JobSpec) -> list[Obj]:
    """Everything a pod group needs, in creation order (pods excluded)."""
    out: list[Obj] = []
    pvc = build_pvc(job, spec)
    if pvc is not None:
        out.append(pvc)
    out += [
        build_configmap(job, spec),
        build_progress_configmap(job),
        build_service_account(job),
        build_role(job),
        build_role_binding(job),
    ]
    if spec.multi_worker or spec.parallel:
        out.append(build_service(job))
    return out
