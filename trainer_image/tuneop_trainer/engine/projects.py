"""Which keras-tuner project directory each tuner the script constructs works in, so
that several tuners in one script, `overwrite=True` and resumes keep their meaning.

A tuner's identity is its place in the script: the n-th tuner constructed. Each
construction has a directory of its own, frozen for it: its trials' fit checkpoints
live in `DIR/trials/<key>/<trial>/`, its keras-tuner project in `DIR/tuner/<project>`
(the project's first construction) or `DIR/tuner/@<g>/<project>` (a later one, `key`
`<project>@<g>`), so the tuner's `project_name` stays the one the script gave:
- `overwrite=True`: a new directory, started afresh. Without tuneop keras-tuner wipes
  the project in place; here the earlier one stays, because a resumed process
  constructs the earlier tuner again and must reload its search, not a later one's.
- `overwrite=False` (keras-tuner's default) with a project an earlier tuner used: a
  copy of the latest directory of that project, made once, so it reloads that search
  as keras-tuner would and goes on in its own copy (a resumed earlier tuner must not
  see the trials the later one added).
The constructions already reached are state on the volume (`DIR/tuner/tuners.json`,
one entry per construction, written atomically once its directory is ready): a resumed
process that reaches construction n again resumes its directory; one that reaches it
for the first time starts it (wiping what a crash there may have left). With parallel
trials every role keeps its own record (`tuners.<tuner id>.json`) and computes the
same directories; none wipes or copies (the roles share the projects' files), so
there a project reused without `overwrite` shares its directory, as before.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

from tuneop_contract import TUNER_DIR, write_atomic
from tuneop_contract.spec import SpecError

log = logging.getLogger(__name__)

RECORD = "tuners.json"
_RECORDS = re.compile(r"tuners(\.[^/]+)?\.json")  # every role's record


@dataclasses.dataclass(frozen=True)
class Placement:
    ordinal: int  # the n-th tuner the script constructed
    project: str  # its project_name
    key: str  # under DIR/trials/; "" for a search started before records were kept
    directory: str  # keras-tuner's `directory`, relative to DIR/tuner/: "" or "@<g>"
    reached: bool  # an earlier process constructed it already: resume, never wipe


class Projects:
    """The placements of this process's tuner constructions, and the record of the
    constructions any process of this search has reached."""

    def __init__(self, root: Path, record_name: str, write: bool, parallel: bool) -> None:
        self.base = root / TUNER_DIR
        self.path = self.base / record_name
        self.write = write
        self.parallel = parallel
        self.wipes = write and not parallel  # the only process writing the projects
        self.placed: list[Placement] = []
        self.recorded = self._load()

    def _load(self) -> list[dict[str, Any]] | None:
        """The recorded constructions; None for a volume whose search started before
        constructions were recorded (then every construction resumes where it was)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            entries = [p.name for p in self.base.iterdir()] if self.base.is_dir() else []
            visible = [name for name in entries if not name.startswith(".")]
            legacy = bool(visible) and not any(_RECORDS.fullmatch(n) for n in visible)
            return None if legacy else []
        except (OSError, ValueError) as exc:
            raise SpecError("DIR", f"cannot read {self.path}: {exc}") from exc
        return list(data["tuners"])

    def reload(self) -> None:
        """Read the record again: a worker that does not write follows the chief's."""
        self.recorded = self._load()

    def project_dir(self, placement: Placement) -> Path:
        return self.base / placement.directory / placement.project

    def place(self, project: str, overwrite: bool, script: str) -> Placement:
        n = len(self.placed)
        if self.recorded is None:
            placement = Placement(n, project, "", "", reached=True)
        elif n < len(self.recorded):
            entry = self.recorded[n]
            if entry["project"] != project:
                raise SpecError(
                    script,
                    f"tuner {n} is project {project!r}, but it was {entry['project']!r} "
                    "when this search started; the script must construct its tuners in "
                    "the same order (or start over with an empty checkpoint directory)",
                )
            placement = Placement(n, project, entry["key"], entry["directory"], reached=True)
        else:
            earlier = [p for p in self.placed if p.project == project]
            if earlier and not overwrite and self.parallel:
                placement = dataclasses.replace(earlier[-1], ordinal=n, reached=False)
            else:
                placement = self._new(n, project)
            self._start(placement, overwrite)
        self.placed.append(placement)
        return placement

    def _new(self, n: int, project: str) -> Placement:
        """The first construction of `project` gets its plain name; later ones a
        generation `@<g>` no construction of this search has used."""
        used = {p.key for p in self.placed} | {e["key"] for e in self.recorded or []}
        if project not in used:
            return Placement(n, project, project, "", reached=False)
        g = 1
        while f"{project}@{g}" in used:
            g += 1
        return Placement(n, project, f"{project}@{g}", f"@{g}", reached=False)

    def _start(self, placement: Placement, overwrite: bool) -> None:
        """First time any process reaches this construction: its directory afresh
        (`overwrite=True`, or a new project) or a copy of the project's latest one
        (reused without overwrite), then recorded."""
        target = self.project_dir(placement)
        earlier = [p for p in self.placed if p.project == placement.project]
        if self.wipes and placement.key not in {p.key for p in earlier}:
            if target.exists() and (overwrite or earlier):
                shutil.rmtree(target)  # what a crash before the record left
            if earlier and not overwrite and self.project_dir(earlier[-1]).exists():
                shutil.copytree(self.project_dir(earlier[-1]), target)
                log.info(
                    "tuner %r reloads the project of an earlier tuner: a copy in %s",
                    placement.project,
                    target,
                )
        if self.write:
            assert self.recorded is not None
            entry = {"project": placement.project, "key": placement.key}
            self.recorded.append({**entry, "directory": placement.directory})
            write_atomic(self.path, json.dumps({"tuners": self.recorded}, indent=1).encode())
