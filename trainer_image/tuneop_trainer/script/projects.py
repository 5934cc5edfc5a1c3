"""Which keras-tuner project directory each tuner the script constructs works in, so
that several tuners in one script, `overwrite=True` and resumes keep their meaning.

A tuner's identity is its place in the script: the n-th tuner constructed. Its
project lives in `DIR/tuner/<key>` and its trials' fit checkpoints in
`DIR/trials/<key>/<trial>/`, where `key` is the project name for the first
generation of that project and `<project>@<g>` for the g-th time a tuner of the same
project was constructed with `overwrite=True`:
- `overwrite=False` (keras-tuner's default) with a project an earlier tuner used:
  the same directory, so it reloads that search, as without tuneop;
- `overwrite=True`: a new generation, started afresh. Without tuneop keras-tuner wipes
  the project there; here the earlier generation stays, because a resumed process
  constructs the earlier tuner again and must reload it, not the later one's state.
The constructions already reached are state on the volume (`DIR/tuner/tuners.json`,
one entry per construction, written atomically before the tuner is made): a resumed
process that reaches construction n again resumes its project (never wipes it); one
that reaches it for the first time honours `overwrite=True` by wiping what a crash may
have left in that directory.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from tuneop_contract import TUNER_DIR, write_atomic

from ..spec import SpecError

log = logging.getLogger(__name__)

RECORD = "tuners.json"


@dataclasses.dataclass(frozen=True)
class Placement:
    ordinal: int  # the n-th tuner the script constructed
    project: str  # its project_name
    key: str  # its directory name under DIR/tuner/ and DIR/trials/
    overwrite: bool
    reached: bool  # an earlier process constructed it already: resume, never wipe


class Projects:
    """The placements of this process's tuner constructions, and the record of the
    constructions any process of this search has reached."""

    def __init__(self, root: Path, record_name: str, write: bool, wipes: bool) -> None:
        self.base = root / TUNER_DIR
        self.path = self.base / record_name
        self.write = write
        self.wipes = wipes  # the process that owns the projects' files
        self.placed: list[Placement] = []
        self.recorded = self._load()

    def _load(self) -> list[dict[str, Any]] | None:
        """The recorded constructions; None for a volume whose search started before
        constructions were recorded (then every construction counts as reached)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            # No record of any process (with parallel trials each keeps its own) beside
            # projects already there: a search started before records were kept.
            stem = RECORD.rsplit(".", 1)[0]
            base = self.base if self.base.is_dir() else None
            legacy = base is not None and any(base.iterdir()) and not any(base.glob(f"{stem}*"))
            return None if legacy else []
        except (OSError, ValueError) as exc:
            raise SpecError("DIR", f"cannot read {self.path}: {exc}") from exc
        return list(data["tuners"])

    def place(self, project: str, overwrite: bool, script: str) -> Placement:
        n = len(self.placed)
        if self.recorded is None:
            placement = Placement(n, project, project, overwrite, reached=True)
        elif n < len(self.recorded):
            entry = self.recorded[n]
            if entry["project"] != project:
                raise SpecError(
                    script,
                    f"tuner {n} is project {project!r}, but it was {entry['project']!r} "
                    "when this search started; the script must construct its tuners in "
                    "the same order (or start over with an empty checkpoint directory)",
                )
            placement = Placement(n, project, entry["key"], overwrite, reached=True)
        else:
            placement = Placement(n, project, self._key(project, overwrite), overwrite, False)
            self._start(placement)
        self.placed.append(placement)
        return placement

    def _key(self, project: str, overwrite: bool) -> str:
        generations = [p.key for p in self.placed if p.project == project]
        if not generations:
            return project
        if not overwrite:
            return generations[-1]  # reloads the latest, as keras-tuner would
        return f"{project}@{len(set(generations))}"

    def _start(self, placement: Placement) -> None:
        """First time any process reaches this construction: wipe leftovers when
        `overwrite=True` (as keras-tuner does), then record it."""
        directory = self.base / placement.key
        if placement.overwrite and self.wipes and directory.exists():
            log.info("tuner %r: overwrite=True: %s started afresh", placement.project, directory)
            shutil.rmtree(directory)
        if self.write:
            assert self.recorded is not None
            self.recorded.append({"project": placement.project, "key": placement.key})
            write_atomic(self.path, json.dumps({"tuners": self.recorded}, indent=1).encode())
