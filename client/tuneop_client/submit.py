"""What `tuneop run` submits: the script and the modules beside it as a ConfigMap, and a
TuningJob in script mode that runs it. Pure: objects in, objects out."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import tuneop_contract as contract
from tuneop_contract.spec import JobSpec

CONFIGMAP_LIMIT = 1_000_000
"""A ConfigMap holds at most 1 MiB; leave room for its metadata."""
NAME_LIMIT = 45
"""The CRD's limit on a TuningJob's name (its children add suffixes)."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
DATA_VOLUME = "data"


class SubmitError(ValueError):
    """A request that cannot become a TuningJob; the message names the option."""


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """`tuneop run`'s options."""

    script: Path
    args: tuple[str, ...] = ()
    name: str = ""
    gpus: int = 1
    workers: int = 1
    image: str = ""
    data: str = ""
    """CLAIM or CLAIM:PATH: a PersistentVolumeClaim mounted read-only (at /data)."""
    queue: str = ""
    elastic: bool = False
    parallel: int = 1
    deterministic: bool = False
    requirements: Path | None = None
    """A pip requirements file, sent in the ConfigMap (spec.script.requirements)."""
    env: tuple[str, ...] = ()
    """NAME=VALUE pairs for the trainer container (e.g. PIP_INDEX_URL of a mirror)."""


def job_name(request: RunRequest) -> str:
    """The job's name: --name, else the script's file name made a DNS-1035 label."""
    name = request.name or re.sub(r"[^a-z0-9-]+", "-", request.script.stem.lower()).strip("-")
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) or len(name) > NAME_LIMIT:
        raise SubmitError(
            f"--name: {name!r} is not a TuningJob name (lower case letters, digits and '-', "
            f"starting with a letter, at most {NAME_LIMIT} characters)"
        )
    return name


def script_files(script: Path, requirements: Path | None = None) -> dict[str, str]:
    """The script and every Python module beside it (one directory; a ConfigMap key
    cannot hold a '/'), by file name; and the requirements file, if any."""
    if script.suffix != ".py" or not script.is_file():
        raise SubmitError(f"SCRIPT: {str(script)!r} is not a Python file (*.py)")
    files = {p.name: p.read_text() for p in sorted(script.parent.glob("*.py")) if p.is_file()}
    if requirements is not None:
        if requirements.suffix == ".py" or not requirements.is_file():
            raise SubmitError(f"--requirements: {str(requirements)!r} is not a requirements file")
        files[requirements.name] = requirements.read_text()
    size = sum(len(text.encode()) for text in files.values())
    if size > CONFIGMAP_LIMIT:
        raise SubmitError(
            f"SCRIPT: {script.name} and the modules beside it are {size // 1024} KiB, more "
            "than a ConfigMap holds (1 MiB): put them on a claim (spec.script.path) or in an "
            "image derived from the trainer's"
        )
    return files


def configmap(name: str, namespace: str, files: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-script",
            "namespace": namespace,
            "labels": {contract.LABEL_JOB: name, "app.kubernetes.io/created-by": "tuneop-client"},
        },
        "data": files,
    }


def tuning_job(request: RunRequest, name: str, namespace: str) -> dict[str, Any]:
    """The TuningJob: script mode from the ConfigMap `<name>-script`."""
    if request.gpus < 0 or request.workers < 1 or request.parallel < 1:
        raise SubmitError("--gpus must be 0 or more, --workers and --parallel 1 or more")
    script: dict[str, Any] = {
        "configMap": {"name": f"{name}-script", "key": request.script.name},
        "args": list(request.args),
        "deterministic": request.deterministic,
    }
    if request.requirements is not None:
        script["requirements"] = request.requirements.name
    distribution: dict[str, Any] = {"workers": request.workers, "gpusPerWorker": request.gpus}
    if request.elastic:
        distribution["elastic"] = {"shapes": _smaller_shapes(request.workers, request.gpus)}
    spec: dict[str, Any] = {"script": script, "distribution": distribution}
    if request.image:
        spec["image"] = request.image
    if request.parallel > 1:
        spec["parallelTrials"] = request.parallel
    if request.data:
        spec["template"] = _data_template(request.data)
    if request.env:
        spec["env"] = [_env_var(pair) for pair in request.env]
    # the operator's and the trainer's own parser: refused here, nothing is created
    refused = JobSpec.from_dict(spec).errors
    if refused:
        raise SubmitError(f"the job would be refused: {refused[0]}")
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if request.queue:
        metadata["labels"] = {QUEUE_LABEL: request.queue}
    return {"apiVersion": contract.API_VERSION, "kind": contract.KIND, "metadata": metadata,
            "spec": spec}  # fmt: skip


def _smaller_shapes(workers: int, gpus: int) -> list[dict[str, int]]:
    """Fewer workers, then fewer GPUs each, down to one GPU: what --elastic allows."""
    shapes = [{"workers": w, "gpusPerWorker": gpus} for w in range(workers - 1, 0, -1)]
    shapes += [{"workers": 1, "gpusPerWorker": g} for g in range(gpus - 1, 0, -1)]
    if not shapes:
        raise SubmitError("--elastic: one worker of one GPU has no smaller shape")
    return shapes[:8]


def _data_template(data: str) -> dict[str, Any]:
    claim, _, path = data.partition(":")
    path = path or "/data"
    if not claim or not path.startswith("/"):
        raise SubmitError(f"--data: {data!r} is not CLAIM or CLAIM:/ABSOLUTE/PATH")
    return {
        "spec": {
            "volumes": [
                {"name": DATA_VOLUME,
                 "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
            ],
            "containers": [
                {"name": contract.TRAINER_CONTAINER,
                 "volumeMounts": [{"name": DATA_VOLUME, "mountPath": path, "readOnly": True}]},
            ],
        }
    }  # fmt: skip


def _env_var(pair: str) -> dict[str, str]:
    """spec.env's entry (the API server refuses the names the trainer keeps for itself)."""
    name, sep, value = pair.partition("=")
    if not sep or not name:
        raise SubmitError(f"--env: {pair!r} is not NAME=VALUE")
    return {"name": name, "value": value}
