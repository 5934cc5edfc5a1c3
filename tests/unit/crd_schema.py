"""The TuningJob CRD's structural schema for the unit tests: the CRD file
(manifests/crd/tuneop.io_tuningjobs.yaml) read, its schema walked, a small validator of
values against it and the API server's structural defaulting."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "manifests" / "crd" / "tuneop.io_tuningjobs.yaml"


def crd() -> dict[str, Any]:
    """The CRD as a dict."""
    return yaml.safe_load(CRD_FILE.read_text())


def schema() -> dict[str, Any]:
    """The TuningJob's openAPIV3Schema."""
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node below `node` (itself included) with its path."""
    yield path, node
    for key, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def check(value: Any, node: dict[str, Any], path: str = "") -> list[str]:
    """A small structural-schema validator (types, enum, bounds, pattern, required,
    unknown fields); enough to catch a sample that drifted from the CRD."""
    errors: list[str] = []
    if value is None:
        return [] if node.get("nullable") else [f"{path}: null"]
    if node.get("x-kubernetes-int-or-string"):
        if not isinstance(value, int | str):
            errors.append(f"{path}: not int-or-string")
        if isinstance(value, str) and "pattern" in node and not re.search(node["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {node['pattern']}")
        return errors
    kind = node.get("type")
    types = {
        "object": dict,
        "array": list,
        "string": str,
        "integer": int,
        "number": int | float,
        "boolean": bool,
    }
    if (kind and not isinstance(value, types[kind])) or (kind != "boolean" and value is True):
        return [f"{path}: {value!r} is not {kind}"]
    if "enum" in node and value not in node["enum"]:
        errors.append(f"{path}: {value!r} not in {node['enum']}")
    if "minimum" in node and value < node["minimum"]:
        errors.append(f"{path}: {value} < {node['minimum']}")
    if "maximum" in node:
        too_big = (
            value >= node["maximum"] if node.get("exclusiveMaximum") else value > node["maximum"]
        )
        if too_big:
            errors.append(f"{path}: {value} above {node['maximum']}")
    if "pattern" in node and not re.search(node["pattern"], value):
        errors.append(f"{path}: {value!r} does not match {node['pattern']}")
    if kind == "object":
        props = node.get("properties") or {}
        for req in node.get("required") or []:
            if req not in value:
                errors.append(f"{path}.{req}: required")
        for key, child in value.items():
            if key in props:
                errors += check(child, props[key], f"{path}.{key}")
            elif isinstance(node.get("additionalProperties"), dict):
                errors += check(child, node["additionalProperties"], f"{path}.{key}")
            elif not node.get("x-kubernetes-preserve-unknown-fields") and path != ".metadata":
                errors.append(f"{path}.{key}: unknown field (would be pruned)")
    if kind == "array":
        if "maxItems" in node and len(value) > node["maxItems"]:
            errors.append(f"{path}: more than {node['maxItems']} items")
        for i, item in enumerate(value):
            errors += check(item, node["items"], f"{path}[{i}]")
    return errors


def apply_defaults(value: Any, node: dict[str, Any]) -> Any:
    """Structural defaulting as the API server does it (defaults of absent fields,
    recursively, also inside defaulted objects)."""
    if isinstance(value, dict) and node.get("type") == "object":
        out = dict(value)
        for key, child in (node.get("properties") or {}).items():
            if key not in out and "default" in child:
                out[key] = child["default"]
            if key in out:
                out[key] = apply_defaults(out[key], child)
        return out
    return value
