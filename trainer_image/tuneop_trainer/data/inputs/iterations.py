"""How often an input object was iterated before a fit, here and in the run resumed.

A `tf.data` pipeline's reshuffling draws a new order at every iterator made on it, and a
PyDataset's state follows the epoch hooks it received, so a fit is exact only if its
input starts where it was in an uninterrupted process. The trainer counts, per object,
the iterators (tf.data) or epochs (PyDataset) made on it; a resumed process, which
skips the trials already done, makes (and drops) what an uninterrupted one had made
before (the `replay` each kind gives).

Whose count: an object made in the current phase of the script - the current trial,
or the stretch between trials and searches (e.g. a data set built per trial in
`HyperModel.fit`, or after the search for the final fit) - starts from zero in every
process, as it does in an uninterrupted one. An object made before (a data set built at
the top of the script and used in every trial) carries the count of the whole run:
`tfdata.json` on the volume, written at each fit's end, keyed by the input's kind and
element structure. Constructors are stamped with the phase they ran in
(`stamped_init`, installed by patches/), and the runtime starts a phase at every search
and trial start and end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuneop_contract import write_atomic

from ...parallel import current

log = logging.getLogger(__name__)

RECORD = "tfdata.json"
_PHASE_ATTR = "_tuneop_phase"
_phase = 0
_counts: dict[int, tuple[Any, list[int]]] = {}  # id(object) → (weakref, [iterations])


def stamped_init(original: Any) -> Any:
    """`original` (a `tf.data.Dataset` or `PyDataset` constructor), then the new object
    stamped with the phase it was made in."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        with contextlib.suppress(AttributeError, TypeError):  # __slots__: counted as shared
            object.__setattr__(self, _PHASE_ATTR, _phase)

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    return __init__


def boundary() -> None:
    """A new phase starts (a search or a trial begins or ends)."""
    global _phase
    _phase += 1


def shared(obj: Any) -> bool:
    """Made before the current phase (or not stamped): its count is the whole run's."""
    return getattr(obj, _PHASE_ATTR, None) != _phase


def counter(obj: Any) -> list[int]:
    """`[iterations made on obj in this process]`, one list per live object."""
    entry = _counts.get(id(obj))
    if entry is not None and entry[0]() is obj:
        return entry[1]
    count = [0]
    try:
        ref: Any = weakref.ref(obj)
    except TypeError:  # no weak references: keep the object
        ref = lambda o=obj: o  # noqa: E731
    _counts[id(obj)] = (ref, count)
    return count


def catch_up(obj: Any, target: int, replay: Callable[[], None]) -> None:
    """`replay()` until this process has made `target` iterations on `obj`."""
    count = counter(obj)
    if count[0] > target:
        log.warning(
            "an input (%s) was iterated %d times before this fit, %d in the run it "
            "resumes: its order may differ from an uninterrupted run's",
            type(obj).__name__,
            count[0],
            target,
        )
    if count[0] < target:
        log.info(
            "replaying %d iteration(s) of an input (%s) an uninterrupted run had made",
            target - count[0],
            type(obj).__name__,
        )
    while count[0] < target:
        replay()
        count[0] += 1


def before_fit(obj: Any, root: Path, key: str) -> int:
    """Iterations an uninterrupted run had made on `obj` when a fit on it starts
    without a checkpoint: this process's count, or the run's for a shared object."""
    made = counter(obj)[0]
    return max(made, recorded(root, key)) if shared(obj) else made


def _path(root: Path) -> Path:
    """With parallel trials one file per trial group (`tfdata.<tuner id>.json`): the
    count is of this process lineage's iterations, and each file has one writer."""
    return root / current().own_file(RECORD)


def recorded(root: Path, key: str) -> int:
    try:
        return int(json.loads(_path(root).read_text()).get(key, 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def record(root: Path, obj: Any, key: str, count: int) -> None:
    """After a fit on a shared object: the run's count, for the fits after it."""
    if not shared(obj):
        return
    path = _path(root)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[key] = count
    write_atomic(path, json.dumps(data, sort_keys=True).encode())
