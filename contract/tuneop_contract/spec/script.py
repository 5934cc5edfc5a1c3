"""`spec.script`: a user's own keras-tuner script (script mode), from a ConfigMap or a
path in the pod. The trainer runs it; the operator mounts and checks the ConfigMap."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from .. import DEFAULT_SCRIPT_KEY, SCRIPT_DIR
from .errors import SpecError
from .read import Doc, flag, mapping, quoted, string, strings

SEARCH_FIELDS = ("hypermodel", "data", "tuner")
"""Spec mode's fields, which a script defines itself."""


@dataclasses.dataclass(frozen=True)
class Script:
    """`spec.script` as given: a ConfigMap (`config_map`, `key`) or a `path`."""

    config_map: str = ""
    """Name of the ConfigMap holding the script ("" with `path`)."""
    key: str = ""
    """The entry script's key in that ConfigMap; "" = `entry_script_key` of its keys."""
    path: str = ""
    """An absolute path in the pod ("" with `config_map`)."""
    args: tuple[str, ...] = ()
    deterministic: bool = False
    continue_optimizer_state: bool = False
    """Hyperband promotions continue the optimizer state (the trainer's switch)."""
    requirements: str = ""
    """A pip requirements file: a key of the ConfigMap, or an absolute path in the pod."""


def parse_script(doc: Doc) -> Script | None:
    """`spec.script`, None in spec mode."""
    if doc.get("script") is None:
        return None
    for other in SEARCH_FIELDS:
        if doc.get(other) is not None:
            raise SpecError(
                f"spec.{other}", "must not be set with spec.script (the script defines it)"
            )
    s = mapping(doc, "script", "spec.script")
    if ("configMap" in s) == ("path" in s):
        raise SpecError("spec.script", "set exactly one of configMap and path")
    args = strings(s, "args", "spec.script.args", "must be a list of strings")
    deterministic = flag(s, "deterministic", "spec.script.deterministic")
    keep = flag(s, "continueOptimizerState", "spec.script.continueOptimizerState")
    requirements = string(s, "requirements", "spec.script.requirements", "")
    if "path" in s:
        path = string(s, "path", "spec.script.path", "")
        if not path.startswith("/"):
            raise SpecError("spec.script.path", f"{quoted(path)} must be an absolute path")
        if requirements and not requirements.startswith("/"):
            raise SpecError(
                "spec.script.requirements",
                f"{quoted(requirements)} must be an absolute path with spec.script.path",
            )
        return Script(path=path, args=args, deterministic=deterministic,
                      continue_optimizer_state=keep, requirements=requirements)  # fmt: skip
    cm = mapping(s, "configMap", "spec.script.configMap")
    key = cm.get("key")
    if key is not None and (not isinstance(key, str) or not key or "/" in key):
        raise SpecError("spec.script.configMap.key", f"{quoted(key)} must be a ConfigMap key")
    return Script(
        config_map=string(cm, "name", "spec.script.configMap.name", ""), key=key or "", args=args,
        deterministic=deterministic, continue_optimizer_state=keep, requirements=requirements,
    )  # fmt: skip


def entry_script_key(script: Script, keys: Iterable[str]) -> str:
    """The ConfigMap key of the entry script: `spec.script.configMap.key`, else the
    map's only key besides the requirements file, else DEFAULT_SCRIPT_KEY. The trainer
    asks it of the mounted map, the operator of the map it reads from the API."""
    if script.key:
        return script.key
    others = [k for k in keys if k != script.requirements]
    return others[0] if len(others) == 1 else DEFAULT_SCRIPT_KEY


def check_script(script: Script | None) -> list[SpecError]:
    """Only spec.script.configMap is mounted at SCRIPT_DIR: a path under it names nothing."""
    if script is None or not _under(script.path, SCRIPT_DIR):
        return []
    return [
        SpecError(
            "spec.script.path",
            f"{SCRIPT_DIR} is where spec.script.configMap is mounted; "
            "use spec.script.configMap for a script in a ConfigMap",
        )
    ]


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")
