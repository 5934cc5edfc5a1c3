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

Each step once: every fit checkpoint records the sizes of the files in the directories
its TensorBoard callbacks write (`<log_dir>`, `train/`, `validation/`) and a resume
rewinds them (checkpoint/event_logs.py). A resumed fit does not write the model summary, the graph
or keras-tuner's HParams session start again (they are in the kept part), and the
TensorBoard callback's batch counters are restored with its state (callback_state.py),
so batch-level curves continue at the next step.

Not covered: summary writers the script creates itself (their buffered events cannot
be flushed at a checkpoint).
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from tuneop_contract import ENV_SCRIPT_WORKDIR, TENSORBOARD_DIR

from ..checkpoint.event_logs import EventLogs
from . import runtime

log = logging.getLogger(__name__)

_warned: set[str] = set()


def linked_init(original: Any) -> Any:
    """`original` (`keras.callbacks.TensorBoard.__init__`), then the callback's log_dir
    linked to the volume while a Runtime is installed (the callback is constructed by
    the script, before any fit)."""

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

    return init


def volume_dir(rt: runtime.Runtime, log_dir: str) -> Path:
    """Where `log_dir`'s logs live: `DIR/tensorboard/<log_dir>` on a writing worker."""
    path = Path(os.path.normpath(log_dir))
    if path.is_absolute() or path.parts[:1] == ("..",):
        path = Path(os.path.abspath(log_dir)).relative_to("/")
    base = rt.root if rt.write else Path(tempfile.gettempdir()) / "tuneop-worker"
    return base / TENSORBOARD_DIR / path


def link(rt: runtime.Runtime, log_dir: str) -> None:
    path = Path(log_dir)
    if _on_volume(rt.root, path.resolve()):
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
    log.info("TensorBoard log_dir %r is kept on the volume: %s", log_dir, target)


def _on_volume(root: Path, path: Path) -> bool:
    """`path` is on the volume, outside the script's working directory there (whose
    relative log_dirs go to DIR/tensorboard like any other)."""
    workdir = os.environ.get(ENV_SCRIPT_WORKDIR)
    if workdir and _within(Path(workdir).resolve(), path):
        return False
    return _within(root.resolve(), path)


def _within(parent: Path, path: Path) -> bool:
    return path == parent or parent in path.parents


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


class FitLogs(EventLogs):
    """The event files one fit's TensorBoard callbacks write: `<log_dir>` (keras-tuner's
    HParams), `train/` and `validation/`."""

    def __init__(self, rt: runtime.Runtime, fit_dir: Path, callbacks: list[Any]) -> None:
        self.boards = [cb for cb in callbacks if _is_tensorboard(cb)]
        self.hparams = [cb for cb in callbacks if _is_hparams(cb)]
        dirs = [
            os.path.join(str(cb.log_dir), sub)
            for cb in self.boards
            for sub in ("", "train", "validation")
        ]
        super().__init__(rt.root, fit_dir, dirs, self._writers, write=rt.write)
        self._graphs: list[tuple[Any, bool]] = []

    def _writers(self) -> list[Any]:
        writers = [w for cb in self.boards for w in getattr(cb, "_writers", {}).values()]
        hparams = [getattr(cb, "_writer", None) for cb in self.hparams]
        return writers + [w for w in hparams if w is not None and hasattr(w, "flush")]

    def resume(self, recorded: dict[str, int] | None) -> None:
        """A fit resumed from a checkpoint that recorded `recorded`: rewind to it, and
        keep the callbacks from writing again what the kept part already has, until
        :meth:`callbacks_ready`."""
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
