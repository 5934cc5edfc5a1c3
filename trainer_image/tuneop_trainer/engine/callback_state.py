"""The state of Keras callbacks, saved with each fit checkpoint and restored on resume,
so a resumed fit's callbacks decide as an uninterrupted run's would (EarlyStopping
stops at the same epoch, ReduceLROnPlateau keeps its patience and cooldown, ...).

What is captured, per callback (matched on resume by position and class name):
- a callback that defines `get_state() -> dict` and `set_state(dict)` declares its own
  state (JSON-serialisable values and numpy arrays);
- Keras's and keras-tuner's stateful callbacks (and subclasses): the attributes in
  `KNOWN` - EarlyStopping's `wait`, `best`, `best_epoch`, `stopped_epoch`,
  `best_weights`; ReduceLROnPlateau's `wait`, `cooldown_counter`, `best`;
  ModelCheckpoint's `best` and batch/epoch counters; SaveBestEpoch's `best_value`.
  Only state: their configuration comes from the script again, and some of it is
  derived lazily (EarlyStopping flips the sign of `min_delta` when it first picks its
  `monitor_op`), so restoring it would corrupt it. Stateless ones (TerminateOnNaN,
  LearningRateScheduler, CSVLogger, ...) capture nothing; TensorBoard its batch
  counters (the steps of batch-level summaries).
- any other callback: its plain attributes - numbers, strings, booleans, None, numpy
  arrays and scalars, and lists/tuples of those. Functions, models and other objects
  are left alone: the script rebuilds them.
Learning rates live in the optimizer's variables, saved with the model.
"""

from __future__ import annotations

import json
import numbers
from typing import Any

import numpy as np

SKIP = frozenset({"model", "_model", "params", "validation_data"})

# class name (matched along the MRO) → the attributes that are state, not configuration
KNOWN: dict[str, tuple[str, ...]] = {
    "EarlyStopping": ("wait", "stopped_epoch", "best", "best_weights", "best_epoch"),
    "ReduceLROnPlateau": ("wait", "cooldown_counter", "best"),
    "ModelCheckpoint": (
        "best",
        "epochs_since_last_save",
        "_batches_seen_since_last_saving",
        "_last_batch_seen",
        "_current_epoch",
    ),
    "SaveBestEpoch": ("best_value",),
    "TunerCallback": (),
    "TerminateOnNaN": (),
    "LearningRateScheduler": (),
    "CSVLogger": (),
    "TensorBoard": ("_global_train_batch", "_global_test_batch"),
    "BackupAndRestore": (),
    "ProgbarLogger": (),
    "RemoteMonitor": (),
    "LambdaCallback": (),
}


def _known_fields(callback: Any) -> tuple[str, ...] | None:
    for cls in type(callback).__mro__:
        if cls.__name__ in KNOWN and cls.__module__.startswith(("keras", "keras_tuner")):
            return KNOWN[cls.__name__]
    return None


class CallbackMismatch(ValueError):
    """The fit's callbacks are not those of the checkpoint."""


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, str | bool | numbers.Number | np.generic):
        return True
    if isinstance(value, np.ndarray):
        return True
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return False


def _own_state(callback: Any) -> dict[str, Any] | None:
    get = getattr(callback, "get_state", None)
    if callable(get) and callable(getattr(callback, "set_state", None)):
        state = get()
        if not isinstance(state, dict):
            raise TypeError(f"{type(callback).__name__}.get_state() must return a dict")
        return state
    return None


def capture(callbacks: list[Any]) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """(JSON description per callback, arrays keyed `callbacks/<i>/<attr>/<j>`)."""
    described: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for i, cb in enumerate(callbacks):
        own = _own_state(cb)
        known = None if own is not None else _known_fields(cb)
        if own is not None:
            source = own
        elif known is not None:
            source = {k: getattr(cb, k) for k in known if hasattr(cb, k)}
        else:
            source = vars(cb)
        values: dict[str, Any] = {}
        for name, value in source.items():
            if name in SKIP or callable(value) or not _plain(value):
                continue
            values[name] = _encode(value, f"callbacks/{i}/{name}", arrays)
        described.append({"class": type(cb).__name__, "own": own is not None, "values": values})
    return described, arrays


def restore(
    callbacks: list[Any], described: list[dict[str, Any]], arrays: dict[str, np.ndarray]
) -> None:
    names = [type(cb).__name__ for cb in callbacks]
    saved = [d["class"] for d in described]
    if names != saved:
        raise CallbackMismatch(
            f"the fit's callbacks are [{', '.join(names)}], the checkpoint's were "
            f"[{', '.join(saved)}]"
        )
    for cb, entry in zip(callbacks, described, strict=True):
        values = {k: _decode(v, arrays) for k, v in entry["values"].items()}
        if entry["own"]:
            cb.set_state(values)
        else:
            for name, value in values.items():
                setattr(cb, name, value)


def _encode(value: Any, key: str, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, np.ndarray):
        arrays[key] = value
        return {"__array__": key}
    if isinstance(value, np.generic):
        return {"__scalar__": value.item(), "dtype": str(value.dtype)}
    if isinstance(value, list | tuple):
        items = [_encode(v, f"{key}/{j}", arrays) for j, v in enumerate(value)]
        return {"__tuple__": items} if isinstance(value, tuple) else items
    if isinstance(value, float) and not np.isfinite(value):
        return {"__float__": repr(value)}
    json.dumps(value)  # raises on anything else
    return value


def _decode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if isinstance(value, dict):
        if "__array__" in value:
            return arrays[value["__array__"]]
        if "__scalar__" in value:
            return np.dtype(value["dtype"]).type(value["__scalar__"])
        if "__tuple__" in value:
            return tuple(_decode(v, arrays) for v in value["__tuple__"])
        if "__float__" in value:
            return float(value["__float__"])
    return value
