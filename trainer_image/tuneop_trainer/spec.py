"""The TuningJob spec as the trainer runs it.

The spec is parsed and validated by the contract (`tuneop_contract.spec.JobSpec`), the
code the operator runs on the same spec. The trainer adds what only it can do: read the
spec file (YAML: a TuningJob manifest or just its spec), ask keras-tuner for the
direction of a metric the contract's table does not know, and find the script inside
the pod. The first error is raised as the contract's `SpecError`, a one-line message
naming the field and saying what is allowed; the CLI prints it, writes it to the
termination-message path and exits 2.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml
from tuneop_contract import SCRIPT_DIR
from tuneop_contract.spec import JobSpec, Script, SpecError, entry_script_key
from tuneop_contract.spec.read import quoted


@dataclasses.dataclass(frozen=True)
class ScriptSpec:
    """`spec.script` with its files found in the pod. Its fields are part of the
    search's fingerprint in the volume's owner record (checkpoint/ownership.py)."""

    path: str  # a ConfigMap key under tuneop_contract.SCRIPT_DIR, or spec.script.path
    args: tuple[str, ...] = ()
    deterministic: bool = False
    field: str = "spec.script.path"  # named in errors about the file
    continue_optimizer: bool = False  # spec.script.continueOptimizerState
    requirements: str = ""  # path of spec.script.requirements, "" = none


@dataclasses.dataclass(frozen=True)
class TrainerSpec:
    """A spec file: the spec as the contract parses it, the script found in the pod
    (None in spec mode) and the job's name (a manifest's metadata.name)."""

    job: JobSpec = dataclasses.field(default_factory=JobSpec)
    script: ScriptSpec | None = None
    job_name: str | None = None


def load_spec_file(path: str | Path) -> TrainerSpec:
    """Read a YAML file holding a TuningJob manifest or just its `spec`."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SpecError("--spec", f"cannot read {path}: {exc.strerror}") from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError("--spec", f"{path} is not valid YAML: {_one_line(exc)}") from exc
    return parse(doc)


def parse(doc: Any) -> TrainerSpec:
    """A manifest (`kind: TuningJob`) or a bare spec mapping → TrainerSpec; SpecError:
    the first thing wrong with it."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise SpecError("spec", "must be a mapping")
    job_name = None
    if "kind" in doc or "apiVersion" in doc:
        if doc.get("kind") != "TuningJob":
            raise SpecError("kind", f"{quoted(doc.get('kind'))} is not TuningJob")
        meta = doc.get("metadata") or {}
        job_name = meta.get("name") if isinstance(meta, dict) else None
        doc = doc.get("spec") or {}
    job = JobSpec.from_dict(doc, metric_direction=keras_tuner_direction)
    if job.errors:
        raise job.errors[0]
    return TrainerSpec(job, resolve_script(job.script), job_name)


def keras_tuner_direction(name: str) -> str | None:
    """keras-tuner's direction for a metric name ("min", "max" or None): loaded only for
    a name the contract's table does not know, so most specs parse without it."""
    from keras_tuner.src.engine.metrics_tracking import infer_metric_direction

    try:
        direction = infer_metric_direction(name)
    except Exception:  # keras-tuner raises for some names instead of returning None
        return None
    return direction if isinstance(direction, str) else None


def resolve_script(script: Script | None, mount: Path = Path(SCRIPT_DIR)) -> ScriptSpec | None:
    """Where the script and its requirements are in the pod: `spec.script.path` as
    given, or the ConfigMap's entry key (`entry_script_key`, the operator's rule too)
    under `mount`, where the operator mounts the map."""
    if script is None:
        return None
    given = ScriptSpec(
        script.path,
        script.args,
        script.deterministic,
        "spec.script.path",
        script.continue_optimizer_state,
        script.requirements,
    )
    if script.path:
        return given
    key = entry_script_key(script, () if script.key else _mounted_keys(mount))
    requirements = script.requirements
    if requirements and not requirements.startswith("/"):
        requirements = str(mount / requirements)
    return dataclasses.replace(
        given, path=str(mount / key), field="spec.script.configMap.key", requirements=requirements
    )


def _mounted_keys(directory: Path) -> list[str]:
    """The keys of a mounted ConfigMap (its volume also holds `..data` links)."""
    try:
        return [p.name for p in directory.iterdir() if p.name[0] != "."]
    except OSError:
        return []


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
