"""SIGTERM → finish the current step → checkpoint → exit EXIT_PREEMPTED (75).

The signal handler only sets a flag: a TF step cannot be interrupted safely, and
writing a checkpoint from inside a signal handler would race with the step. The
training loop polls `requested()` after every step; when set, it writes a checkpoint
and raises `Preempted`. `Preempted` derives from BaseException on purpose: keras-tuner
catches `Exception` around `run_trial` and would record the trial as failed and go on.

TensorFlow's coordination service installs its own SIGTERM handler when a
MultiWorkerMirroredStrategy starts; it only logs "SIGTERM caught", so the workers would
train on until the kubelet's SIGKILL and lose every step since the last periodic
checkpoint. `reclaim()` after the strategy starts routes SIGTERM back here.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType

log = logging.getLogger(__name__)

_requested = threading.Event()
_requested_at: float | None = None


class Preempted(BaseException):
    """Raised by the training loop after the preemption checkpoint is on disk."""


def install() -> None:
    """Route SIGTERM (and SIGINT, for people at a terminal) to the flag."""
    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)


def reclaim() -> None:
    """Route SIGTERM back to the flag (main thread): `signal.signal` puts the
    interpreter's C handler back in place of one a library installed in C, which
    `signal.getsignal` cannot see. A SIGTERM that arrived meanwhile went to that
    library: the kubelet's SIGKILL ends the process and the last checkpoint stands."""
    signal.signal(signal.SIGTERM, _handler)


def _handler(signum: int, _frame: FrameType | None) -> None:
    global _requested_at
    if not _requested.is_set():
        _requested_at = time.monotonic()
        log.warning(
            "%s received: finishing the current step, then checkpoint and exit",
            signal.Signals(signum).name,
        )
    _requested.set()


def requested() -> bool:
    return _requested.is_set()


def seconds_since_request() -> float | None:
    return None if _requested_at is None else time.monotonic() - _requested_at
