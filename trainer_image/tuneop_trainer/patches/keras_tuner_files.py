"""keras-tuner's own files: written atomically, by the writer only, read back in order.

- keras-tuner writes its JSON files (oracle, tuner, trials) in place; a kill during a
  write leaves a truncated file and a search that cannot be reloaded. Every such write
  goes through `tuneop_contract.write_atomic` instead (Stateful.save and Trial.save both
  call `utils.save_json`).
- Only the chief of a multi-worker group writes: the other workers keep the same oracle
  in memory and read the directory only at start-up (`set_writer(False)`).
- keras-tuner's `Oracle.reload` fills `trials` in the order the file system lists the
  trial directories, not the order they were created, and `get_best_trials` breaks ties
  by that order (BayesianOptimization also feeds its model in it). That order changes
  when other files of the project directory are written (measured: two workers of one
  trial group reading 15 ms apart while another group saved its tuner file got
  ['0', '1', '2'] and ['2', '0', '1']): a resumed search could name another best trial
  than an uninterrupted one, and the two workers built different "best" models (a
  collective shape mismatch). Reloaded trials are put back in creation order.
"""

from __future__ import annotations

import json
from typing import Any

from keras_tuner.src import utils as kt_utils
from tuneop_contract import write_atomic

_state = {"write": True, "atomic": False, "ordered": False}


def set_writer(write: bool) -> None:
    """False on non-chief workers: keras-tuner's JSON files are the chief's."""
    _state["write"] = write


def is_writer() -> bool:
    return bool(_state["write"])


def _atomic_save_json(path: str, obj: Any) -> str:
    text = json.dumps(obj)
    if _state["write"]:
        write_atomic(path, text.encode())
    return text


def install_atomic_json() -> None:
    """keras-tuner's `utils.save_json` writes atomically, and only in the writer
    (idempotent)."""
    if _state["atomic"]:
        return
    _state["atomic"] = True
    kt_utils.save_json = _atomic_save_json


def creation_order(trial_id: str) -> tuple[int, int, str]:
    """keras-tuner numbers trials as it creates them ("0", "01", ...); any other id
    comes after, by name."""
    return (0, int(trial_id), "") if trial_id.isdigit() else (1, 0, trial_id)


def in_creation_order(oracle: Any) -> None:
    oracle.trials = dict(sorted(oracle.trials.items(), key=lambda item: creation_order(item[0])))


def install_trial_order() -> None:
    """`Oracle.reload` puts the trials back in creation order (idempotent)."""
    if _state["ordered"]:
        return
    _state["ordered"] = True
    from keras_tuner.src.engine import oracle as oracle_module

    original = oracle_module.Oracle.reload

    def reload(self: Any) -> None:
        original(self)
        in_creation_order(self)

    oracle_module.Oracle.reload = reload
