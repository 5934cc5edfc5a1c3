"""The format version of what the trainer keeps on the checkpoint volume (the layout of
checkpoints, best epochs, keras-tuner's project, the records beside them).

A trainer image resumes only a volume in the format it writes: a volume of another
format (a newer image's, or one this image no longer reads) is refused with one line
naming both versions (exit 2), before anything on it is read or written, instead of
being half-understood. The volume says its format in FORMAT_FILE, written once by the
process that records the search; every checkpoint's meta carries it too, and loading a
checkpoint of another format stops the trainer the same way (FormatMismatch passes
through keras-tuner, which would otherwise record a failed trial). A volume without
the file was written before the format was recorded, in the layout of format 1, and
resumes as such.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuneop_contract import write_atomic

from .spec import SpecError

FORMAT = 1
"""The format this trainer writes and reads."""
FORMAT_FILE = "tuneop-format.json"
META_KEY = "format"
"""Where a checkpoint's meta.json says its format."""
FIELD = "spec.checkpoint"


class FormatMismatch(BaseException):
    """A checkpoint of another format was about to be loaded (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def refusal(found: Any, where: str) -> str:
    newer = isinstance(found, int) and found > FORMAT
    run = "the newer image that wrote it" if newer else "an image of that version"
    return (
        f"{where} is in checkpoint format version {found}, this trainer image reads "
        f"version {FORMAT}: run {run}, or start afresh on a new claim"
    )


def check_volume(root: Path, write: bool) -> None:
    """Refuse a volume of another format (SpecError naming spec.checkpoint); the
    writer records this trainer's format on a volume that has none. The volume's own
    errors (OSError) are the caller's to report."""
    path = root / FORMAT_FILE
    try:
        found = json.loads(path.read_text()).get(META_KEY)
    except FileNotFoundError:
        if write:
            root.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps({META_KEY: FORMAT}).encode())
        return
    except (ValueError, AttributeError):  # not the JSON object written here
        found = "unknown (unreadable " + FORMAT_FILE + ")"
    if found != FORMAT:
        raise SpecError(FIELD, refusal(found, "the checkpoint volume"))


def check_meta(meta: dict[str, Any], path: Path) -> None:
    """A loaded checkpoint is of this trainer's format (none recorded: format 1)."""
    found = meta.get(META_KEY, 1)
    if found != FORMAT:
        raise FormatMismatch(f"{FIELD}: " + refusal(found, f"checkpoint {path}"))
