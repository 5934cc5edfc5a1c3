"""The format version of what the trainer keeps on the checkpoint volume (the layout of
checkpoints, best epochs, keras-tuner's project, the records beside them).

A trainer image resumes only a volume in the format it writes: a volume of another
format (a newer image's, or one this image no longer reads) is refused with one line
naming both versions (exit 2), before anything on it is read or written, instead of
being half-understood. The volume says its format in FORMAT_FILE, written once by the
process that records the search; every checkpoint's meta carries it too, and loading a
checkpoint of another format stops the trainer the same way (FormatMismatch passes
through keras-tuner, which would otherwise record a failed trial). A volume without
the file was written before the format was recorded, in the layout of format 1.

Format 2: spec mode runs on the engine (modes/tuningjob.py), so a spec-mode
search keeps its trials' checkpoints where a script's are (`trials/search/<id>/fit-<n>`)
and its best epochs in keras-tuner's project; a spec-mode volume of format 1 is refused.
Script mode's layout is the same in both: it resumes a format-1 volume exactly (the
volume keeps saying 1; the checkpoints written from then on say 2, which an older image
refuses rather than half-reads).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuneop_contract import TRIALS_DIR, TUNER_DIR, write_atomic
from tuneop_contract.spec import SpecError

FORMAT = 2
"""The format this trainer writes (spec mode reads only it)."""
SCRIPT_READS = (1, 2)
"""The formats script mode resumes: its layout did not change between them."""
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


def check_volume(root: Path, write: bool, reads: tuple[int, ...] = (FORMAT,)) -> None:
    """Refuse a volume of a format not in `reads` (SpecError naming spec.checkpoint);
    the writer records the format on a volume that has none: 1 for a search started
    before formats were recorded, else this trainer's. The volume's own errors
    (OSError) are the caller's to report."""
    path = root / FORMAT_FILE
    try:
        found = json.loads(path.read_text()).get(META_KEY)
    except FileNotFoundError:
        legacy = (root / TUNER_DIR).exists() or (root / TRIALS_DIR).exists()
        if legacy and 1 not in reads:
            raise SpecError(FIELD, refusal(1, "the checkpoint volume")) from None
        if write:
            root.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps({META_KEY: 1 if legacy else FORMAT}).encode())
        return
    except (ValueError, AttributeError):  # not the JSON object written here
        found = "unknown (unreadable " + FORMAT_FILE + ")"
    if found not in reads:
        raise SpecError(FIELD, refusal(found, "the checkpoint volume"))


def check_meta(meta: dict[str, Any], path: Path) -> None:
    """A loaded checkpoint is of a format this trainer reads (none recorded: 1; a
    spec-mode volume of format 1 never gets this far)."""
    found = meta.get(META_KEY, 1)
    if found not in SCRIPT_READS:
        raise FormatMismatch(f"{FIELD}: " + refusal(found, f"checkpoint {path}"))
