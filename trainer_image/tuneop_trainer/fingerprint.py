"""What a search depends on, recorded at its first run and compared at every resume,
so a resume against different code, data or arguments stops with a one-line error
instead of silently mixing two searches in one checkpoint directory."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from tuneop_contract import write_atomic

from .spec import SpecError

RECORD_FILE = "fingerprint.json"


def digest_arrays(*arrays: Any) -> str:
    """sha256 over dtype, shape and bytes of each array (None allowed)."""
    digest = hashlib.sha256()
    for array in arrays:
        if array is None:
            digest.update(b"none")
            continue
        a = np.ascontiguousarray(array)
        digest.update(f"{a.dtype}{a.shape}".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def check_or_record(
    root: Path, record: dict[str, Any], fields: dict[str, str], write: bool
) -> None:
    """Compare `record` with the one in `root` (write it if there is none).
    `fields` maps each record key to (the field named in the error) and says what it
    is, e.g. {"data": "spec.data"}; the first difference raises SpecError."""
    path = root / RECORD_FILE
    if not path.exists():
        if write:
            write_atomic(path, json.dumps(record, sort_keys=True).encode())
        return
    saved = json.loads(path.read_text())
    for key, field in fields.items():
        if saved.get(key) != record.get(key):
            raise SpecError(
                field,
                f"{key} changed since the search in {root} started ({_short(saved.get(key))} "
                f"then, {_short(record.get(key))} now); resume with what it started with, or "
                "start over with an empty checkpoint directory",
            )


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:12] + "..."
