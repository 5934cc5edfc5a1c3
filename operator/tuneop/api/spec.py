"""The operator's checks of a TuningJob spec: those that need Kubernetes.

The spec is parsed and validated by the contract (`tuneop_contract.spec.JobSpec`), the
code the trainer runs on the same spec: each field's default (the CRD's; a unit test
keeps them in sync, so the operator behaves the same on an object the API server did
not default), its type and bounds, the search's fields and the checks across fields
(`JobSpec.errors`). The operator adds what only Kubernetes' rules or objects decide:
`validate` checks resource quantities (the API server's grammar), the checkpoint
claim's size and access modes against the pods that share it, `spec.template` (what a
pod template may hold here) and that a trainer image is set (the operator's default
fills an unset one); `check_script_configmap` and `check_existing_claim` check the
ConfigMap and the claim the spec names, as read from the API server. Each error names
the field (`spec.resources.limits.cpu`); the operator turns them into condition
Failed/InvalidSpec and a Warning Event.

The operator reads of the search only what shapes its pods (a script's ConfigMap,
`tuner.batchSize` for elastic shapes): the trial count comes from the trainer's
progress, which works the same for spec mode and for a `spec.script`."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import tuneop_contract as contract
from tuneop_contract.spec import (
    DEFAULT_GPU_RESOURCE,
    PARALLEL_ACCESS_MODE,
    JobSpec,
    SpecError,
    entry_script_key,
)

from . import podtemplate


def job_spec(job: dict[str, Any]) -> JobSpec:
    """The job's spec with the shape its status says is in use (status.shape)."""
    spec = JobSpec.from_dict(job.get("spec") or {})
    shape = ((job.get("status") or {}).get("shape") or {}).get("index")
    return spec.at_shape(shape) if isinstance(shape, int) else spec


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
    """What the contract refused (`spec.errors`), then the checks that need Kubernetes'
    rules; each error names the offending field."""
    errors: list[SpecError] = []
    if not spec.image.strip():
        errors.append(
            SpecError(
                "spec.image",
                "unset, and the operator has no default trainer image "
                "(chart value trainer.image, TUNEOP_OPERATOR_TRAINER_IMAGE)",
            )
        )
    errors += spec.errors
    errors += _check_resources(spec)
    if not spec.checkpoint.existing_claim and parse_quantity(spec.checkpoint.size) is None:
        errors.append(SpecError("spec.checkpoint.size", f"{spec.checkpoint.size!r} is invalid"))
    access_modes = _check_access_modes(spec)
    # spec.template (checked on the raw spec: it is laid over the pods as given), named
    # before the claim's access modes
    template = [SpecError(f, m) for f, m in podtemplate.check(spec.raw.get("template"))]
    return errors + template + access_modes


def _check_resources(spec: JobSpec) -> list[SpecError]:
    """`spec.resources`: quantities, no GPU resource (gpusPerWorker sets it), requests
    within limits."""
    errors: list[SpecError] = []
    requests = spec.resources.get("requests") or {}
    limits = spec.resources.get("limits") or {}
    for section_name, section in (("requests", requests), ("limits", limits)):
        for key, value in section.items():
            field = f"spec.resources.{section_name}.{key}"
            if key in (spec.distribution.gpu_resource, DEFAULT_GPU_RESOURCE):
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
    if "ReadWriteOncePod" not in modes:
        return errors
    if spec.parallel or spec.multi_worker:
        errors.append(
            SpecError(
                "spec.checkpoint.accessModes",
                "ReadWriteOncePod allows one pod only: not with distribution.workers > 1 "
                "or parallelTrials > 1",
            )
        )
    elastic = spec.distribution.elastic  # with parallel trials the parser refuses it whole
    for i, shape in enumerate(elastic.shapes if elastic and not spec.parallel else ()):
        if shape.workers > 1:
            where = f"spec.distribution.elastic.shapes[{i}]"
            errors.append(SpecError(where, "ReadWriteOncePod allows one pod: workers must be 1"))
    return errors


def check_script_configmap(spec: JobSpec, configmap: dict[str, Any]) -> SpecError | None:
    """Whether the ConfigMap named by `spec.script.configMap` (as read from the API)
    holds the entry script (`entry_script_key`, the rule the trainer resolves by) and
    the requirements file it names. None = fine, or not script.configMap mode. A
    ConfigMap that does not exist is the caller's case (it waits for it)."""
    script = spec.script
    if script is None or not script.config_map:
        return None
    name = script.config_map
    # both are mounted as files: `kubectl create configmap --from-file` puts a file
    # that is not UTF-8 into binaryData
    every = sorted({*(configmap.get("data") or {}), *(configmap.get("binaryData") or {})})
    have = ", ".join(every) or "none"
    requirements = script.requirements
    if requirements and not requirements.startswith("/") and requirements not in every:
        return SpecError(
            "spec.script.requirements",
            f"ConfigMap {name!r} has no key {requirements!r} (it has: {have})",
        )
    keys = [k for k in every if k != requirements]  # the entry script is not the requirements
    if not keys:
        return SpecError("spec.script.configMap", f"ConfigMap {name!r} is empty (no script)")
    if entry_script_key(script, keys) in keys:
        return None
    if script.key:
        return SpecError(
            "spec.script.configMap.key",
            f"ConfigMap {name!r} has no key {script.key!r} (it has: {have})",
        )
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
