"""keras-tuner 1.4.8's GridSearchOracle, made to survive a reload.

It walks the grid with two in-memory fields that `Oracle.get_state` does not save: a
linked list of the trial ids in grid order (`_ordered_ids`) and the queue of trials
whose next combination is still to be tried (`_populate_next`). A reloaded oracle has
both empty: the first trial that ends after the restart raises `KeyError: '<trial id>'`
in `populate_space`, or, with nothing queued, the search stops early (keras-tuner
issue #1055, open). Both are now part of the oracle's state, so a resumed grid search
hands out the same trials in the same order as an uninterrupted one. A state saved
without them (a project started by plain keras-tuner) is rebuilt: the tried trials in
grid order, each queued once, in the order they ended.
"""

from __future__ import annotations

import functools
from typing import Any

ORDERED_KEY = "tuneop_grid_ordered_ids"
QUEUE_KEY = "tuneop_grid_populate_next"

_installed = [False]


def install() -> None:
    """Idempotent."""
    if _installed[0]:
        return
    _installed[0] = True
    from keras_tuner.src.engine import oracle as oracle_module
    from keras_tuner.src.tuners import gridsearch

    cls = gridsearch.GridSearchOracle

    def get_state(self: Any) -> dict[str, Any]:
        # looked up at call time: other patches of Oracle.get_state still apply
        state: dict[str, Any] = oracle_module.Oracle.get_state(self)
        state[ORDERED_KEY] = linked_order(self._ordered_ids)
        state[QUEUE_KEY] = list(self._populate_next)
        return state

    def set_state(self: Any, state: dict[str, Any]) -> None:
        oracle_module.Oracle.set_state(self, state)
        if ORDERED_KEY in state:
            ordered, queue = list(state[ORDERED_KEY]), list(state.get(QUEUE_KEY, []))
        else:
            ordered, queue = _rebuilt(self, state)
        self._ordered_ids = gridsearch.LinkedList()
        for trial_id in ordered:
            self._ordered_ids.insert(trial_id)
        self._populate_next = queue

    cls.get_state = get_state
    cls.set_state = set_state


def linked_order(ordered: Any) -> list[str]:
    """The data of keras-tuner's LinkedList, first to last."""
    memory, following = ordered._memory, ordered._next_index
    out = []
    index = following[None]  # the list's head hangs off index None
    while index is not None:
        out.append(memory[index])
        index = following[index]
    return out


def _rebuilt(oracle: Any, state: dict[str, Any]) -> tuple[list[str], list[str]]:
    """For a state saved without the grid fields: the started trials whose values are
    known, in grid order (the oracle's own comparison), and the ended ones queued."""
    known = [t for t in state.get("start_order", []) if t in oracle.trials]

    def compare(a: str, b: str) -> int:
        result: int = oracle._compare(
            oracle.trials[a].hyperparameters.values, oracle.trials[b].hyperparameters.values
        )
        return result

    ordered = sorted(known, key=functools.cmp_to_key(compare))
    queue = [t for t in state.get("end_order", []) if t in oracle.trials]
    return ordered, queue or known[:1]
