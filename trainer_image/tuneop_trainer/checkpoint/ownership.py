"""Which TuningJob a checkpoint volume's search belongs to.

A retained claim outlives its job: a job deleted and re-created under the same name (or
another job naming it as `existingClaim`) would otherwise continue the old search on it
without anyone asking. The first trainer of a job records the job's uid, name and a
fingerprint of what makes the search the same (OWNER_FILE); every later start compares.
A record for another uid stops the trainer with a one-line error naming
`spec.checkpoint.adopt`, unless that field is true: then the record is rewritten (one
atomic write) to this job, and the search goes on. Runs before TensorFlow is imported, so
a refusal costs a second, not a start-up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuneop_contract import (
    ENV_JOB_NAME,
    ENV_JOB_NAMESPACE,
    ENV_JOB_UID,
    OWNER_FILE,
    now_rfc3339,
    write_atomic,
)
from tuneop_contract.spec import SpecError

from ..spec import TrainerSpec

FIELD = "spec.checkpoint.adopt"

log = logging.getLogger(__name__)


def spec_fingerprint(spec: TrainerSpec) -> str:
    """sha256 over the parts of the spec that define the search (model, data, tuner,
    script), not how it is run or checkpointed."""
    search = {
        "hypermodel": spec.job.hypermodel,
        "script": dataclasses.asdict(spec.script) if spec.script else None,
        "pythonPath": list(spec.job.python_path),
        "data": dataclasses.asdict(spec.job.data),
        "tuner": dataclasses.asdict(spec.job.tuner),
    }
    text = json.dumps(search, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def check(root: Path, spec: TrainerSpec, write: bool, env: Mapping[str, str] = os.environ) -> None:
    """Record this job as the owner of `root`, or refuse (SpecError naming
    spec.checkpoint.adopt) a record of another job's uid. Without TUNEOP_JOB_UID (the
    trainer run outside the operator) nothing is checked. A process that does not write
    (a worker other than the chief, a parallel search's trial group) only compares, and
    when adopting leaves the rewrite to the writer."""
    uid = env.get(ENV_JOB_UID, "")
    if not uid:
        return
    mine = {
        "uid": uid,
        "namespace": env.get(ENV_JOB_NAMESPACE, ""),
        "name": env.get(ENV_JOB_NAME, spec.job_name or ""),
        "specFingerprint": spec_fingerprint(spec),
    }
    path = root / OWNER_FILE
    saved = read(path)
    if saved is None:
        if write:
            # a fresh volume, or one from before owners were recorded: this job's now
            write_atomic(path, _dump({**mine, "recordedAt": now_rfc3339()}))
        return
    if saved.get("uid") == uid:
        return
    if not spec.job.checkpoint.adopt:
        raise SpecError(FIELD, refusal(saved, mine))
    if write:
        adopted = [*_list(saved.get("adoptedFrom")), str(saved.get("uid"))]
        record = {**mine, "recordedAt": now_rfc3339(), "adoptedFrom": adopted}
        write_atomic(path, _dump(record))
        log.warning("adopted the search of %s (uid %s)", _who(saved), saved.get("uid"))


def refusal(saved: Mapping[str, Any], mine: Mapping[str, Any]) -> str:
    same = saved.get("specFingerprint") == mine["specFingerprint"]
    return (
        f"the checkpoint volume holds the search of TuningJob {_who(saved)} "
        f"(uid {saved.get('uid')}, {'the same' if same else 'a different'} search spec), "
        f"not of this job (uid {mine['uid']}); set spec.checkpoint.adopt: true to continue "
        "that search, or use a new claim to start over"
    )


def read(path: Path) -> dict[str, Any] | None:
    """The owner record, or None when there is none. An unreadable record is refused
    by the caller as another owner's (uid unknown) rather than overwritten."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"uid": "unknown (unreadable record)"}
    return data if isinstance(data, dict) else {"uid": "unknown (not a JSON object)"}


def _who(record: Mapping[str, Any]) -> str:
    ns, name = record.get("namespace") or "?", record.get("name") or "?"
    return f"{ns}/{name}"


def _list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _dump(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True).encode()
