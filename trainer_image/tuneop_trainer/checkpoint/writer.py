"""Checkpoints written on a thread, one in flight: the training thread waits only for
the copy of the state to host memory."""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .store import CheckpointStore
from .volume import volume_errors, volume_usage

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SaveDone:
    seconds: float  # wall time of the write, checksum, fsyncs and rename
    usage: tuple[int, int, int] | None  # volume_usage(root) right after it
    position: tuple[int, int] | None = None  # (epoch, step) saved, from meta
    cpu_seconds: float = 0.0  # the writer thread's CPU time for it (time.thread_time)


class BackgroundWriter:
    """Writes checkpoints on a thread, at most one in flight.

    `submit` takes state already copied to the host (`model_state`): it waits for the
    previous save, then hands the arrays to a new thread and returns. A save's error is
    raised by the next `submit` or `wait` (VolumeError for a volume error). `on_saved`
    is called on the writer thread once a save is durable, with what it took and the
    volume use under `root` after it."""

    def __init__(
        self, root: Path | None = None, on_saved: Callable[[SaveDone], None] | None = None
    ) -> None:
        self.root = root
        self.on_saved = on_saved
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(
        self,
        store: CheckpointStore,
        arrays: dict[str, np.ndarray],
        meta: dict[str, Any],
    ) -> None:
        self.wait()
        meta = copy.deepcopy(meta)  # the caller goes on appending to its history
        self._thread = threading.Thread(
            target=self._run, args=(store, arrays, meta), name="checkpoint-writer"
        )
        self._thread.start()

    def _run(
        self,
        store: CheckpointStore,
        arrays: dict[str, np.ndarray],
        meta: dict[str, Any],
    ) -> None:
        t0, cpu0 = time.monotonic(), time.thread_time()
        try:
            with volume_errors(store.root):
                store.save(arrays, meta)
        except BaseException as exc:  # handed to the training thread
            self._error = exc
            return
        seconds, cpu = time.monotonic() - t0, time.thread_time() - cpu0
        if self.on_saved is not None:
            usage = None if self.root is None else volume_usage(self.root)
            position = (meta["epoch"], meta["step"]) if "step" in meta else None
            try:
                self.on_saved(SaveDone(seconds, usage, position, cpu))
            except Exception:  # reporting must not turn a durable save into a failure
                log.exception("reporting a checkpoint failed")

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        """Block until no save is in flight; raise the last save's error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error
