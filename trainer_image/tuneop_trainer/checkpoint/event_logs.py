"""TensorBoard event files that show every step once after any number of preemptions
(both modes: script mode's TensorBoard callbacks, spec mode's `spec.tuner.tensorboard`).

A resumed fit continues from its checkpoint, so what was written after that checkpoint
is written again. So every checkpoint records the size of each file in the fit's log
directories (its writers flushed first), and resuming from it truncates those files to
their recorded sizes and removes the event files an interrupted process created after
it (older than this process's start; this process's own files are newer). A fit that
starts afresh after an interrupted attempt rewinds to what its directories held when it
first started (`tensorboard-start.json` in the fit's checkpoint directory). Sizes, not
event steps: what a step means differs by summary (epochs, batches, optimizer
iterations), and a truncated file ends at a record boundary the writer itself made.

Not covered: files in the directories that other writers append to while the fit runs,
and node clocks that disagree (files are told apart by modification time).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .store import replace_synced

START_RECORD = "tensorboard-start.json"
"""In a fit's checkpoint directory: the event files' sizes when the fit first started."""

_started = time.time()  # the files of an interrupted process are older than this one


class EventLogs:
    """The event files in `dirs`, written by `writers()` (flushed before sizes are
    read); keys are paths relative to `root` (the checkpoint volume), so a record made
    on one pod holds on the next."""

    def __init__(
        self,
        root: Path,
        fit_dir: Path,
        dirs: Iterable[str],
        writers: Callable[[], Iterable[Any]],
        write: bool = True,
    ) -> None:
        self.base = os.path.realpath(root)
        self.fit_dir = fit_dir
        self.dirs = sorted({os.path.realpath(d) for d in dirs})
        self.writers = writers
        self.write = write

    def _key(self, path: str) -> str:
        return os.path.relpath(path, self.base) if path.startswith(self.base + os.sep) else path

    def _files(self) -> dict[str, str]:
        """key -> path of every regular file in the directories."""
        found: dict[str, str] = {}
        for d in self.dirs:
            try:
                entries = list(os.scandir(d))
            except FileNotFoundError:
                continue
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    found[self._key(entry.path)] = entry.path
        return found

    def sizes(self) -> dict[str, int]:
        """The files' sizes now, their writers flushed: what a checkpoint records."""
        if not self.dirs:
            return {}
        for writer in self.writers():
            writer.flush()
        return {key: os.path.getsize(path) for key, path in self._files().items()}

    def rewind(self, recorded: dict[str, int] | None) -> None:
        """Back to `recorded` (None: a checkpoint written before checkpoints recorded
        it, left as it is)."""
        if not self.write or recorded is None:
            return
        for key, path in self._files().items():
            size = recorded.get(key)
            if size is None:
                if os.path.getmtime(path) < _started:
                    os.unlink(path)
            elif os.path.getsize(path) > size:
                with open(path, "r+b") as handle:
                    handle.truncate(size)
                    os.fsync(handle.fileno())

    def start(self) -> None:
        """A fit that starts afresh: rewind to its first start's record, or make it."""
        if not self.dirs or not self.write:
            return
        record = self.fit_dir / START_RECORD
        if record.exists():
            self.rewind(json.loads(record.read_text()))
            return
        self.fit_dir.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.sizes()))
        replace_synced(tmp, record)
