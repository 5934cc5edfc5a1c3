"""Typed reads of one field of a TuningJob spec: its value, its default when the field is
absent or null, or a SpecError naming the field and saying what is allowed."""

from __future__ import annotations

from typing import Any

from .errors import SpecError

Doc = dict[str, Any]
"""A mapping of the spec as YAML or the API server gives it."""


def quoted(value: Any) -> str:
    """A value as messages show it: a string in double quotes, anything else as repr."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def mapping(doc: Doc, key: str, field: str) -> Doc:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(field, "must be a mapping")
    return value


def items(doc: Doc, key: str, field: str) -> list[Any]:
    """A list, [] when absent."""
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(field, "must be a list")
    return value


def string(doc: Doc, key: str, field: str, default: str) -> str:
    value = doc.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise SpecError(field, f"{quoted(value)} must be a string")
    return value


def strings(doc: Doc, key: str, field: str, problem: str) -> tuple[str, ...]:
    """A list of strings, () when absent; `problem` is the message otherwise."""
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(field, problem)
    return tuple(value)


def integer(doc: Doc, key: str, field: str, default: int, minimum: int | None = None) -> int:
    """An integer (not a bool), at least `minimum` when one is given."""
    value = doc.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        bound = "" if minimum is None else f" >= {minimum}"
        raise SpecError(field, f"{quoted(value)} must be an integer{bound}")
    if minimum is not None and value < minimum:
        raise SpecError(field, f"{value} must be >= {minimum}")
    return value


def flag(doc: Doc, key: str, field: str) -> bool:
    """true or false; false when absent."""
    value = doc.get(key, False)
    if not isinstance(value, bool):
        raise SpecError(field, f"{quoted(value)} must be true or false")
    return value


def one_of(value: str, allowed: tuple[str, ...], field: str) -> None:
    if value not in allowed:
        raise SpecError(field, f"{quoted(value)} is not one of {', '.join(allowed)}")
