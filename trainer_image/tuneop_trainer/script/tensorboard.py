"""TensorBoard logs of a script, kept on the checkpoint volume and shown once per step
after any number of preemptions.

Where they go: a `keras.callbacks.TensorBoard(log_dir)` the script constructs gets its
`log_dir` (relative to the script's working directory, or absolute) made a symbolic
link to `DIR/tensorboard/<log_dir>` (an absolute path without its leading `/`), so the
script still finds its logs where it wrote them, keras-tuner's per-trial
subdirectories (`<log_dir>/<trial>/execution<n>`) and its HParams summaries land on the
volume, and `tensorboard --logdir DIR/tensorboard` shows the whole search. A log_dir
that already exists as a non-empty directory in the pod is left alone (warned once); a
log_dir already on the volume is used as it is. Workers that do not write checkpoints
(the non-chief workers of a multi-worker group) log to a directory of their own in the
pod, as Keras advises.

Each step once: a resumed fit continues from its checkpoint, so what its callbacks
wrote after that checkpoint is written again. Every fit checkpoint records the size of
each event file in the directories its TensorBoard callbacks write (`<log_dir>`,
`train/`, `validation/`), after flushing their writers; resuming from that checkpoint
truncates those files to their recorded sizes and removes the event files the
interrupted process created after it. A fit that starts afresh after an interrupted
attempt rewinds to what the directories held when the fit first started (recorded
then, in the fit's directory). A resumed fit does not write the model summary, the
graph or keras-tuner's HParams session start again (they are in the kept part), and
the TensorBoard callback's batch counters are restored with its state
(callback_state.py), so batch-level curves continue at the next step.

Not covered: summary writers the script creates itself (their buffered events cannot
be flushed at a checkpoint), and clocks that differ between the node of an interrupted
process and the next one (files are told apart by modification time).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ..checkpoint import replace_synced
from . import runtime

log = logging.getLogger(__name__)

TENSORBOARD_DIR = "tensorboard"
START_RECORD = "tensorboard-start.json"
"""In a fit's directory: the event files' sizes when the fit first started."""

_started = time.time()  # files of an interrupted process are older than this one
_installed = False
_warned: set[str] = set()


def install() -> None:
    """Link every TensorBoard callback's log_dir to the volume while a Runtime is
    installed (the callback is constructed by the script, before any fit)."""
    global _installed
    if _installed:
        return
    import keras

    original = keras.callbacks.TensorBoard.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        rt = runtime.current()
        if rt is not None:
            try:
                link(rt, str(self.log_dir))
            except OSError as exc:  # e.g. a working directory the pod may not write
                _warn_once(
                    str(self.log_dir),
                    f"TensorBoard log_dir {self.log_dir!r} stays in the pod, lost at a "
                    f"preemption: cannot link it to the volume ({exc})",
                )

    keras.callbacks.TensorBoard.__init__ = init
    _installed = True


def volume_dir(rt: runtime.Runtime, log_dir: str) -> Path:
    """Where `log_dir`'s logs live: `DIR/tensorboard/<log_dir>` on a writing worker."""
    path = Path(os.path.normpath(log_dir))
    if path.is_absolute() or path.parts[:1] == ("..",):
        path = Path(os.path.abspath(log_dir)).relative_to("/")
    base = rt.root if rt.write else Path(tempfile.gettempdir()) / "tuneop-worker"
    return base / TENSORBOARD_DIR / path


def link(rt: runtime.Runtime, log_dir: str) -> None:
    path = Path(log_dir)
    root = rt.root.resolve()
    if path.resolve() == root or root in path.resolve().parents:
        return  # the script logs to the volume itself
    target = volume_dir(rt, log_dir)
    if path.is_symlink():
        if Path(os.readlink(path)) == target:
            return
        path.unlink()
    elif path.is_dir():
        if any(path.iterdir()):
            _warn_once(
                log_dir,
                f"TensorBoard log_dir {log_dir!r} already holds files in the pod: its "
                "logs stay there and are lost at a preemption (an empty or new log_dir "
                f"is kept on the volume, {target})",
            )
            return
        path.rmdir()
    target.mkdir(parents=True, exist_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path, target_is_directory=True)
    _warn_once(log_dir, f"TensorBoard log_dir {log_dir!r} is kept on the volume: {target}")


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning("%s", message)


def _is_tensorboard(callback: Any) -> bool:
    return any(
        c.__name__ == "TensorBoard" and c.__module__.startswith("keras")
        for c in type(callback).__mro__
    )


def _is_hparams(callback: Any) -> bool:
    return type(callback).__module__.startswith("tensorboard.plugins.hparams")


class FitLogs:
    """The event files one fit's TensorBoard callbacks write (see the module doc)."""

    def __init__(self, rt: runtime.Runtime, fit_dir: Path, callbacks: list[Any]) -> None:
        self.rt = rt
        self.fit_dir = fit_dir
        self.boards = [cb for cb in callbacks if _is_tensorboard(cb)]
        self.hparams = [cb for cb in callbacks if _is_hparams(cb)]
        self.dirs = sorted(
            {
                os.path.realpath(os.path.join(str(cb.log_dir), sub))
                for cb in self.boards
                for sub in ("", "train", "validation")
            }
        )
        self.base = os.path.realpath(rt.root)
        self._graphs: list[tuple[Any, bool]] = []

    def _key(self, path: str) -> str:
        return os.path.relpath(path, self.base) if path.startswith(self.base + os.sep) else path

    def _files(self) -> dict[str, str]:
        """key -> path of every regular file in the fit's directories."""
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
        for cb in self.boards:
            for writer in list(getattr(cb, "_writers", {}).values()):
                writer.flush()
        for cb in self.hparams:
            writer = getattr(cb, "_writer", None)
            if writer is not None and hasattr(writer, "flush"):
                writer.flush()
        return {key: os.path.getsize(path) for key, path in self._files().items()}

    def rewind(self, recorded: dict[str, int]) -> None:
        """Back to `recorded`: longer files truncated, files an interrupted process
        created after it removed (this process's own files are newer than its start)."""
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
        if not self.dirs or not self.rt.write:
            return
        record = self.fit_dir / START_RECORD
        if record.exists():
            self.rewind(json.loads(record.read_text()))
            return
        self.fit_dir.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.sizes()))
        replace_synced(tmp, record)

    def resume(self, recorded: dict[str, int] | None) -> None:
        """A fit resumed from a checkpoint that recorded `recorded` (None: one written
        before checkpoints recorded them, left as it is): rewind to it, and keep the
        callbacks from writing again what the kept part already has, until
        :meth:`callbacks_ready`."""
        if self.rt.write and self.dirs and recorded is not None:
            self.rewind(recorded)
        self._graphs = [(cb, cb.write_graph) for cb in self.boards]
        for cb in self.boards:
            cb.write_graph = False  # the model summary (at set_model) and the graph
        for cb in self.hparams:
            cb.on_train_begin = lambda logs=None: None  # the HParams session start

    def callbacks_ready(self) -> None:
        """The fit's CallbackList is made (set_model done): the callbacks' own options
        back, for any later fit the script gives them to."""
        for cb, write_graph in self._graphs:
            cb.write_graph = write_graph
        self._graphs = []
