"""`spec.template`: what a job's partial PodTemplateSpec may hold, and the cluster-wide
trainer defaults (chart `trainer.*`) that fill what a job leaves unset.

Real GPU pods need what no fixed pod spec foresees: a data-set claim, pull secrets, pod
labels for cost accounting, a RuntimeClass, spread constraints, an init container that
fetches data, the UID range of an OpenShift project. Instead of one TuningJob field per
Kubernetes feature, the job carries a PodTemplateSpec fragment; the operator builds its
pod as before and lays the fragment over it (render.overlay). What the operator must
own to keep its promises (resume after preemption, least privilege, restricted pod
security, one place per setting) is listed in `OWNED_SPEC`/`OWNED_CONTAINER` and rejected
by `check` naming the field; the CRD's CEL rejects the scalar ones already at the API
server.

Merge rules (docs/design/operator.md, "Pod template"; carried out by render.overlay):
- metadata.labels/annotations are added to the pod's; the operator's label keys and
  the `tuneop.io/` prefix are reserved (rejected), so the operator's selectors hold.
- Lists are merged by name: `volumes` and the trainer's `volumeMounts` are appended to
  the operator's (a name or mount path of the operator's is rejected), `initContainers`
  run before the trainer; `imagePullSecrets`, `envFrom`, `topologySpreadConstraints`
  are taken as given.
- securityContext (pod, trainer container, init containers) is merged key by key over
  the operator's restricted one; whatever it sets must stay within the restricted Pod
  Security Standard (no root, no privilege escalation, only NET_BIND_SERVICE added,
  RuntimeDefault/Localhost seccomp), so a job can give its pods a UID/GID range but
  never weaken them.
- GPU-only parts (`runtimeClassName`, `topologySpreadConstraints`) go only to pods
  that request `spec.distribution.gpuResource`; everything else to every pod built from
  the trainer image (the trainer workers, an oracle pod).

Pure functions on dicts (no import of `spec`, which calls `check`); unit-tested in
tests/unit/test_operator_podtemplate.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import tuneop_contract as contract

from . import names

Obj = dict[str, Any]
Error = tuple[str, str]
"""(field, message): `tuneop_contract.spec.SpecError`'s two parts."""

FIELD = "spec.template"

OPERATOR_LABELS = frozenset(
    {
        names.LABEL_NAME,
        names.LABEL_INSTANCE,
        names.LABEL_MANAGED_BY,
        names.LABEL_COMPONENT,
        names.LABEL_JOB,
        names.LABEL_WORKER_INDEX,
        names.LABEL_ATTEMPT,
    }
)
RESERVED_PREFIX = "tuneop.io/"
"""Label and annotation keys under this prefix are the operator's."""

OWNED_VOLUMES = frozenset(
    {names.CHECKPOINT_VOLUME, names.SPEC_VOLUME, names.SCRIPT_VOLUME, names.SHM_VOLUME}
)
INIT_MOUNTABLE = frozenset({names.CHECKPOINT_VOLUME, names.SPEC_VOLUME})
"""The operator's volumes every trainer pod has, which init containers may mount too
(e.g. to put code on the checkpoint volume)."""
OWNED_PATHS = (
    contract.DEFAULT_CHECKPOINT_DIR,
    contract.DEFAULT_SPEC_FILE.rsplit("/", 1)[0],
    contract.SCRIPT_DIR,
    "/dev/shm",
)
"""Mount paths of the operator's volumes: a template mount may not be one of them, nor
above or below one."""

OWNED_SPEC: dict[str, str] = {
    "restartPolicy": "set by the operator (Never: the operator decides about restarts)",
    "terminationGracePeriodSeconds": "set spec.terminationGracePeriodSeconds instead",
    "serviceAccountName": "set by the operator (<job>-trainer, allowed to report progress only)",
    "serviceAccount": "set by the operator (<job>-trainer, allowed to report progress only)",
    "automountServiceAccountToken": "set by the operator (the trainer reports with the token)",
    "hostname": "set by the operator (the DNS names of workers and the oracle)",
    "subdomain": "set by the operator (the DNS names of workers and the oracle)",
    "setHostnameAsFQDN": "set by the operator (the DNS names of workers and the oracle)",
    "nodeSelector": "set spec.nodeSelector instead",
    "affinity": "set spec.affinity instead",
    "tolerations": "set spec.tolerations instead",
    "priorityClassName": "set spec.priorityClassName instead",
    "priority": "set spec.priorityClassName instead (the API server fills priority)",
    "nodeName": "not allowed (it bypasses the scheduler); use spec.nodeSelector",
    "activeDeadlineSeconds": "not allowed (the operator decides when a pod group ends)",
    "hostNetwork": "not allowed by the restricted Pod Security Standard",
    "hostPID": "not allowed by the restricted Pod Security Standard",
    "hostIPC": "not allowed by the restricted Pod Security Standard",
    "ephemeralContainers": "not allowed (added with kubectl debug, never in a template)",
    "overhead": "not allowed (set by the RuntimeClass admission from runtimeClassName)",
    "resources": "set spec.resources instead (pod-level resources are not supported)",
    "resourceClaims": "not supported yet (GPUs come from spec.distribution)",
}
"""Pod spec fields a template may not set, and why (the InvalidSpec message)."""

HOST_NAMESPACES = frozenset({"hostNetwork", "hostPID", "hostIPC"})
ALLOWED_SPEC = frozenset(
    {
        "containers",
        "initContainers",
        "volumes",
        "imagePullSecrets",
        "securityContext",
        "runtimeClassName",
        "topologySpreadConstraints",
        "schedulerName",
        "schedulingGates",
        "preemptionPolicy",
        "dnsPolicy",
        "dnsConfig",
        "hostAliases",
        "enableServiceLinks",
        "readinessGates",
        "os",
        "hostUsers",
        "shareProcessNamespace",
    }
)
GPU_ONLY_SPEC = frozenset({"runtimeClassName", "topologySpreadConstraints"})
"""Applied only to pods that request GPUs (not to an oracle pod on a CPU node)."""

OWNED_CONTAINER: dict[str, str] = {
    "image": "set spec.image instead",
    "imagePullPolicy": "set spec.imagePullPolicy instead",
    "command": "set by the operator (python -m tuneop_trainer run; a script: spec.script)",
    "args": "set by the operator (a script's arguments: spec.script.args)",
    "env": "set spec.env instead",
    "resources": "set spec.resources and spec.distribution.gpusPerWorker instead",
    "ports": "set by the operator (metrics, tf-worker, oracle)",
    "terminationMessagePath": "set by the operator (the trainer's final summary)",
    "terminationMessagePolicy": "set by the operator (the trainer's final summary)",
    "restartPolicy": "not allowed on the trainer container",
}
ALLOWED_CONTAINER = frozenset({"name", "envFrom", "volumeMounts", "securityContext", "workingDir"})
ALLOWED_INIT_CONTAINER = frozenset(
    {
        "name",
        "image",
        "imagePullPolicy",
        "command",
        "args",
        "env",
        "envFrom",
        "volumeMounts",
        "resources",
        "securityContext",
        "workingDir",
    }
)

RESTRICTED_VOLUME_TYPES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
"""The volume types the restricted Pod Security Standard allows."""
SECCOMP_TYPES = ("RuntimeDefault", "Localhost")
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
POD_SECURITY_KEYS = frozenset(
    {
        "runAsUser",
        "runAsGroup",
        "runAsNonRoot",
        "fsGroup",
        "fsGroupChangePolicy",
        "supplementalGroups",
        "supplementalGroupsPolicy",
        "seccompProfile",
        "seLinuxOptions",
        "appArmorProfile",
    }
)
CONTAINER_SECURITY_KEYS = frozenset(
    {
        "runAsUser",
        "runAsGroup",
        "runAsNonRoot",
        "allowPrivilegeEscalation",
        "privileged",
        "capabilities",
        "readOnlyRootFilesystem",
        "seccompProfile",
        "seLinuxOptions",
        "appArmorProfile",
        "procMount",
    }
)
RESTRICTED_CONTAINER_SECURITY: Obj = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
}
"""What the operator sets on every container it builds or is given."""


@dataclasses.dataclass(frozen=True)
class Defaults:
    """Cluster-wide trainer defaults (chart `trainer.*`, TUNEOP_OPERATOR_TRAINER_*): each
    fills the job's field when the job leaves it unset; a job's own value wins whole."""

    image: str = ""
    """spec.image of jobs without one."""
    image_pull_secrets: tuple[str, ...] = ()
    """spec.template.spec.imagePullSecrets (names) of jobs without any."""
    tolerations: tuple[Obj, ...] = ()
    """spec.tolerations (e.g. the GPU pool's taints) of jobs without any."""
    priority_class_name: str = ""
    """spec.priorityClassName of jobs without one."""


def with_defaults(job: Obj, defaults: Defaults) -> Obj:
    """`job` with the fields it leaves unset filled from `defaults` (a copy; the object
    in the API is not written). Unset: absent, or "" for the strings (the CRD defaults
    priorityClassName to ""); an empty list given by the job is its own value (none)."""
    spec: Obj = dict(job.get("spec") or {})
    if not str(spec.get("image") or "").strip() and defaults.image:
        spec["image"] = defaults.image
    if not spec.get("priorityClassName") and defaults.priority_class_name:
        spec["priorityClassName"] = defaults.priority_class_name
    if "tolerations" not in spec and defaults.tolerations:
        spec["tolerations"] = [dict(t) for t in defaults.tolerations]
    template = spec.get("template")
    pod_spec = template.get("spec") if isinstance(template, dict) else None
    if defaults.image_pull_secrets and not (
        isinstance(pod_spec, dict) and "imagePullSecrets" in pod_spec
    ):
        template = dict(template) if isinstance(template, dict) else {}
        pod_spec = dict(pod_spec) if isinstance(pod_spec, dict) else {}
        pod_spec["imagePullSecrets"] = [{"name": n} for n in defaults.image_pull_secrets]
        template["spec"] = pod_spec
        spec["template"] = template
    if spec == (job.get("spec") or {}):
        return job
    return {**job, "spec": spec}


# --- check -------------------------------------------------------------------------


def check(template: Any, field: str = FIELD) -> list[Error]:
    """What is wrong with `spec.template`, each error naming its field."""
    if template is None:
        return []
    if not isinstance(template, dict):
        return [(field, "must be an object (a partial PodTemplateSpec)")]
    errors: list[Error] = []
    for key in template:
        if key not in ("metadata", "spec"):
            errors.append((f"{field}.{key}", "unknown field (a template has metadata and spec)"))
    errors += _check_metadata(template.get("metadata"), f"{field}.metadata")
    pod_spec = template.get("spec")
    if pod_spec is None:
        return errors
    if not isinstance(pod_spec, dict):
        return [*errors, (f"{field}.spec", "must be an object (a partial PodSpec)")]
    where = f"{field}.spec"
    for key, value in pod_spec.items():
        if key in HOST_NAMESPACES and value is False:
            continue  # the default, spelled out
        if key in OWNED_SPEC:
            errors.append((f"{where}.{key}", OWNED_SPEC[key]))
        elif key not in ALLOWED_SPEC:
            errors.append((f"{where}.{key}", _unsupported(ALLOWED_SPEC)))
        elif key == "hostUsers" and value is not True and value is not False:
            errors.append((f"{where}.{key}", "must be true or false"))
    volumes = _named_list(pod_spec, "volumes", where, errors)
    template_volumes = {str(v.get("name")) for v in volumes}
    for i, volume in enumerate(volumes):
        errors += _check_volume(volume, f"{where}.volumes[{i}]")
    errors += _check_pod_security(pod_spec.get("securityContext"), f"{where}.securityContext")
    pull = pod_spec.get("imagePullSecrets")
    if pull is not None and not (
        isinstance(pull, list) and all(isinstance(s, dict) and s.get("name") for s in pull)
    ):
        errors.append((f"{where}.imagePullSecrets", "must be a list of {name: <Secret>}"))
    for i, container in enumerate(_named_list(pod_spec, "containers", where, errors)):
        errors += _check_trainer(container, f"{where}.containers[{i}]", template_volumes)
    init_volumes = template_volumes | INIT_MOUNTABLE
    for i, init in enumerate(_named_list(pod_spec, "initContainers", where, errors)):
        errors += _check_init(init, f"{where}.initContainers[{i}]", init_volumes)
    return errors


def _unsupported(allowed: Iterable[str]) -> str:
    return (
        "not supported in a TuningJob's pod template (allowed: " + ", ".join(sorted(allowed)) + ")"
    )


def reserved_key(key: str) -> bool:
    return key in OPERATOR_LABELS or key.startswith(RESERVED_PREFIX)


def _check_metadata(meta: Any, field: str) -> list[Error]:
    if meta is None:
        return []
    if not isinstance(meta, dict):
        return [(field, "must be an object")]
    errors: list[Error] = []
    for key, value in meta.items():
        if key not in ("labels", "annotations"):
            errors.append(
                (
                    f"{field}.{key}",
                    "set by the operator (a template may set labels and annotations)",
                )
            )
            continue
        if not isinstance(value, dict):
            errors.append((f"{field}.{key}", "must be a map of strings"))
            continue
        for k, v in value.items():
            if reserved_key(str(k)):
                errors.append((f"{field}.{key}.{k}", "reserved for the operator's own labels"))
            elif not isinstance(v, str):
                errors.append((f"{field}.{key}.{k}", "must be a string"))
    return errors


def _named_list(pod_spec: Obj, key: str, where: str, errors: list[Error]) -> list[Obj]:
    """pod_spec[key] as a list of objects with unique names (errors added otherwise)."""
    value = pod_spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        errors.append((f"{where}.{key}", "must be a list of objects"))
        return []
    seen: set[str] = set()
    for i, item in enumerate(value):
        name = item.get("name")
        if not isinstance(name, str) or not name:
            errors.append((f"{where}.{key}[{i}].name", "required"))
        elif name in seen:
            errors.append((f"{where}.{key}[{i}].name", f"{name!r} appears twice"))
        seen.add(str(name))
    return list(value)


def _check_volume(volume: Obj, field: str) -> list[Error]:
    name = str(volume.get("name"))
    if name in OWNED_VOLUMES:
        return [(f"{field}.name", f"{name!r} is the operator's volume (reserved)")]
    sources = [k for k in volume if k != "name"]
    bad = [k for k in sources if k not in RESTRICTED_VOLUME_TYPES]
    if bad:
        return [
            (
                f"{field}.{bad[0]}",
                "volume type not allowed by the restricted Pod Security Standard (allowed: "
                + ", ".join(RESTRICTED_VOLUME_TYPES)
                + ")",
            )
        ]
    if len(sources) != 1:
        return [(field, "must have exactly one volume source")]
    return []


def _check_mounts(container: Obj, field: str, volumes: set[str]) -> list[Error]:
    mounts = container.get("volumeMounts")
    if mounts is None:
        return []
    if not isinstance(mounts, list) or not all(isinstance(m, dict) for m in mounts):
        return [(f"{field}.volumeMounts", "must be a list of objects")]
    errors: list[Error] = []
    for i, mount in enumerate(mounts):
        where = f"{field}.volumeMounts[{i}]"
        name, path = str(mount.get("name") or ""), str(mount.get("mountPath") or "")
        if name not in volumes:
            errors.append((f"{where}.name", f"{name!r} is not a volume of {FIELD}.spec.volumes"))
        if not path.startswith("/"):
            errors.append((f"{where}.mountPath", "must be an absolute path"))
            continue
        clash = next((p for p in OWNED_PATHS if _overlaps(path, p)), None)
        if clash is not None:
            errors.append((f"{where}.mountPath", f"{path} overlaps the operator's mount {clash}"))
    return errors


def _overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    return a == b or a.startswith(b + "/") or b.startswith(a.rstrip("/") + "/")


def _check_trainer(container: Obj, field: str, volumes: set[str]) -> list[Error]:
    name = container.get("name")
    if name != names.TRAINER_CONTAINER:
        return [
            (
                f"{field}.name",
                f"only the {names.TRAINER_CONTAINER!r} container can be given "
                "(extra containers: initContainers)",
            )
        ]
    errors: list[Error] = []
    for key in container:
        if key in OWNED_CONTAINER:
            errors.append((f"{field}.{key}", OWNED_CONTAINER[key]))
        elif key not in ALLOWED_CONTAINER:
            errors.append((f"{field}.{key}", _unsupported(ALLOWED_CONTAINER)))
    env_from = container.get("envFrom")
    if env_from is not None and not (
        isinstance(env_from, list)
        and all(isinstance(e, dict) and ("configMapRef" in e or "secretRef" in e) for e in env_from)
    ):
        errors.append((f"{field}.envFrom", "must be a list of {configMapRef|secretRef, prefix}"))
    for i, source in enumerate(env_from if isinstance(env_from, list) else []):
        prefix = str(source.get("prefix") or "") if isinstance(source, dict) else ""
        reserved = next((p for p in contract.RESERVED_ENV_PREFIXES if prefix.startswith(p)), None)
        if reserved:
            errors.append(
                (f"{field}.envFrom[{i}].prefix", f"{reserved} is reserved (set by the operator)")
            )
    errors += _check_mounts(container, field, volumes)
    errors += _check_container_security(
        container.get("securityContext"), f"{field}.securityContext"
    )
    return errors


def _check_init(container: Obj, field: str, volumes: set[str]) -> list[Error]:
    errors: list[Error] = []
    if container.get("name") == names.TRAINER_CONTAINER:
        errors.append((f"{field}.name", f"{names.TRAINER_CONTAINER!r} is the trainer container"))
    if not container.get("image"):
        errors.append((f"{field}.image", "required"))
    for key in container:
        if key == "restartPolicy":
            errors.append((f"{field}.{key}", "sidecar containers are not supported"))
        elif key not in ALLOWED_INIT_CONTAINER:
            errors.append((f"{field}.{key}", _unsupported(ALLOWED_INIT_CONTAINER)))
    mounts = container.get("volumeMounts")
    for i, mount in enumerate(mounts if isinstance(mounts, list) else []):
        name = str(mount.get("name") or "") if isinstance(mount, dict) else ""
        if name not in volumes:
            errors.append(
                (
                    f"{field}.volumeMounts[{i}].name",
                    f"{name!r} is not a volume of {FIELD}.spec.volumes nor checkpoints or spec",
                )
            )
    errors += _check_container_security(
        container.get("securityContext"), f"{field}.securityContext"
    )
    return errors


def _check_common_security(ctx: Obj, field: str) -> list[Error]:
    errors: list[Error] = []
    if "runAsNonRoot" in ctx and ctx["runAsNonRoot"] is not True:
        errors.append((f"{field}.runAsNonRoot", "must be true (restricted Pod Security Standard)"))
    for key in ("runAsUser", "runAsGroup"):
        if key in ctx and not (_uid(ctx[key]) and (key != "runAsUser" or ctx[key] != 0)):
            errors.append((f"{field}.{key}", "must be an integer >= 1 (not root)"))
    seccomp = ctx.get("seccompProfile")
    if seccomp is not None and (
        not isinstance(seccomp, dict) or seccomp.get("type") not in SECCOMP_TYPES
    ):
        errors.append((f"{field}.seccompProfile.type", "must be RuntimeDefault or Localhost"))
    apparmor = ctx.get("appArmorProfile")
    if apparmor is not None and (
        not isinstance(apparmor, dict) or apparmor.get("type") not in SECCOMP_TYPES
    ):
        errors.append((f"{field}.appArmorProfile.type", "must be RuntimeDefault or Localhost"))
    selinux = ctx.get("seLinuxOptions")
    if selinux is not None:
        if not isinstance(selinux, dict) or selinux.get("user") or selinux.get("role"):
            errors.append((f"{field}.seLinuxOptions", "user and role must not be set"))
        elif str(selinux.get("type") or "") not in SELINUX_TYPES:
            errors.append(
                (f"{field}.seLinuxOptions.type", "must be one of " + ", ".join(SELINUX_TYPES[1:]))
            )
    return errors


def _uid(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31


def _check_pod_security(ctx: Any, field: str) -> list[Error]:
    if ctx is None:
        return []
    if not isinstance(ctx, dict):
        return [(field, "must be an object")]
    errors = [
        (f"{field}.{k}", _unsupported(POD_SECURITY_KEYS)) for k in ctx if k not in POD_SECURITY_KEYS
    ]
    errors += _check_common_security(ctx, field)
    if "fsGroup" in ctx and not _uid(ctx["fsGroup"]):
        errors.append((f"{field}.fsGroup", "must be an integer >= 1"))
    groups = ctx.get("supplementalGroups")
    if groups is not None and not (isinstance(groups, list) and all(_uid(g) for g in groups)):
        errors.append((f"{field}.supplementalGroups", "must be a list of integers >= 1"))
    return errors


def _check_container_security(ctx: Any, field: str) -> list[Error]:
    if ctx is None:
        return []
    if not isinstance(ctx, dict):
        return [(field, "must be an object")]
    errors = [
        (f"{field}.{k}", _unsupported(CONTAINER_SECURITY_KEYS))
        for k in ctx
        if k not in CONTAINER_SECURITY_KEYS
    ]
    errors += _check_common_security(ctx, field)
    restricted = "not allowed by the restricted Pod Security Standard"
    if ctx.get("privileged", False) is not False:
        errors.append((f"{field}.privileged", restricted))
    if ctx.get("allowPrivilegeEscalation", False) is not False:
        errors.append((f"{field}.allowPrivilegeEscalation", restricted))
    if ctx.get("procMount", "Default") != "Default":
        errors.append((f"{field}.procMount", restricted))
    caps = ctx.get("capabilities")
    if caps is not None:
        if not isinstance(caps, dict):
            errors.append((f"{field}.capabilities", "must be an object"))
        else:
            added = [c for c in caps.get("add") or [] if c != "NET_BIND_SERVICE"]
            if added:
                errors.append(
                    (
                        f"{field}.capabilities.add",
                        f"{added[0]} {restricted} (only NET_BIND_SERVICE)",
                    )
                )
            if "drop" in caps and "ALL" not in (caps.get("drop") or []):
                errors.append((f"{field}.capabilities.drop", "must include ALL (restricted)"))
    return errors
