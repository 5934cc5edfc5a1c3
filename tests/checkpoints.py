"""Committed checkpoints on a checkpoint volume, read from the volume itself (the trainer
tests and the e2e tests).

A test that kills a trainer and then asserts what the resumed one restores must kill it
only once that checkpoint is committed. The progress record does not say so: it names
the step trained, and that step's save is written in the background, still in flight
when the record (or the next steps) is already out. The commit is the rename in
tuneop_trainer/checkpoint/store.py: a checkpoint is written into `.tmp-ckpt-<seq>-<pid>`
(state.npz, meta.json, then MANIFEST.json, each fsynced) and renamed to `ckpt-<seq>`;
a resumed trainer restores the newest `ckpt-<seq>` whose manifest verifies. Stdlib only:
the e2e tests read the job's claim with it.
"""

from __future__ import annotations

import json
from pathlib import Path

PREFIX = "ckpt-"  # checkpoint/store.py PREFIX, META_FILE, MANIFEST_FILE
META_FILE = "meta.json"
MANIFEST_FILE = "MANIFEST.json"


def positions(fit_dir: Path) -> list[tuple[int, int]]:
    """(epoch, step) of each committed checkpoint of one fit (`trials/<project>/<trial>/
    fit-<n>` or `fits/fit-<n>`), oldest first. A temp directory is not one; a checkpoint
    pruned while it is read is left out."""
    found = []
    for path in sorted(fit_dir.glob(f"{PREFIX}*")):
        try:
            if not (path / MANIFEST_FILE).is_file():
                continue  # pruned (removed file by file) while listed
            meta = json.loads((path / META_FILE).read_text())
            found.append((int(meta["epoch"]), int(meta["step"])))
        except (OSError, ValueError, KeyError):
            continue
    return found


def committed(fit_dir: Path, at: tuple[int, int] = (0, 0)) -> bool:
    """The fit's newest committed checkpoint, the one a trainer killed now resumes from,
    is at (epoch, step) `at` or later (an epoch-end checkpoint of epoch e is (e + 1, 0))."""
    found = positions(fit_dir)
    return bool(found) and found[-1] >= at
