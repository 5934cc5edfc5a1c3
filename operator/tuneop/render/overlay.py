"""`spec.template` laid over a pod the operator built from the trainer image: the
merge rules of api.podtemplate (which also checks the template). Pure functions on
dicts; unit-tested in tests/unit/test_operator_podtemplate.py."""

from __future__ import annotations

import copy
from typing import Any

from tuneop_contract.spec import JobSpec

from ..api import names, podtemplate

Obj = dict[str, Any]


def requests_gpus(pod: Obj, resource: str) -> bool:
    """Whether a container of `pod` has a limit > 0 of `resource`."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        limit = ((container.get("resources") or {}).get("limits") or {}).get(resource)
        try:
            if limit is not None and float(limit) > 0:
                return True
        except (TypeError, ValueError):
            continue
    return False


def apply(pod: Obj, spec: JobSpec, *, container: str = names.TRAINER_CONTAINER) -> Obj:
    """`pod` (built by the operator from the trainer image) with the job's
    `spec.template` laid over it; the operator's parts stay as they are. `container`:
    the pod's trainer-image container, which gets the template's `trainer` container
    (another pod, e.g. an oracle, names its own). The template is assumed checked
    (`podtemplate.check`): an invalid job gets no pods. A new dict; `pod` is not changed."""
    template = spec.raw.get("template") or {}
    out = copy.deepcopy(pod)
    if not isinstance(template, dict):
        return out
    meta = template.get("metadata") or {}
    out_meta = out.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        entries = (meta.get(key) or {}).items()
        extra = {str(k): str(v) for k, v in entries if not podtemplate.reserved_key(str(k))}
        if extra:
            out_meta[key] = {**extra, **(out_meta.get(key) or {})}  # the operator's win
    given: Obj = copy.deepcopy(template.get("spec") or {})
    pod_spec = out.setdefault("spec", {})
    gpus = requests_gpus(out, spec.distribution.gpu_resource)
    for key, value in given.items():
        if key in podtemplate.OWNED_SPEC or key not in podtemplate.ALLOWED_SPEC:
            continue
        if key in podtemplate.GPU_ONLY_SPEC and not gpus:
            continue
        if key == "volumes":
            pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), *value]
        elif key == "securityContext":
            pod_spec["securityContext"] = _merge_security(pod_spec.get("securityContext"), value)
        elif key == "initContainers":
            pod_spec["initContainers"] = [
                {**c, "securityContext": _restricted_container_security(c.get("securityContext"))}
                for c in value
            ]
        elif key == "containers":
            for given_container in value:
                if given_container.get("name") == names.TRAINER_CONTAINER:
                    _overlay_container(pod_spec, container, given_container)
        else:
            pod_spec[key] = value
    return out


def _merge_security(operator: Obj | None, given: Obj) -> Obj:
    merged = {**(operator or {}), **given}
    merged["runAsNonRoot"] = True
    return merged


def _restricted_container_security(given: Obj | None) -> Obj:
    merged = {**podtemplate.RESTRICTED_CONTAINER_SECURITY, **(given or {})}
    caps = dict(merged.get("capabilities") or {})
    caps["drop"] = sorted({*(caps.get("drop") or []), "ALL"})
    merged["capabilities"] = caps
    merged["allowPrivilegeEscalation"] = False
    merged["runAsNonRoot"] = True
    return merged


def _overlay_container(pod_spec: Obj, name: str, given: Obj) -> None:
    target = next((c for c in pod_spec.get("containers") or [] if c.get("name") == name), None)
    if target is None:
        return
    for key, value in given.items():
        if key == "volumeMounts":
            target["volumeMounts"] = [*(target.get("volumeMounts") or []), *value]
        elif key == "securityContext":
            target["securityContext"] = _restricted_container_security(
                {**(target.get("securityContext") or {}), **value}
            )
        elif key in podtemplate.ALLOWED_CONTAINER and key != "name":
            target[key] = value
