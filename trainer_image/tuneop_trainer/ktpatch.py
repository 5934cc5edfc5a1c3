"""Process-wide changes to keras-tuner and Keras that both modes (`run`, `exec`) need.

- keras-tuner writes its JSON files (oracle, tuner, trials) in place; a kill during a
  write leaves a truncated file and a search that cannot be reloaded. Every such write
  goes through `tuneop_contract.write_atomic` instead (Stateful.save and Trial.save both
  call `utils.save_json`).
- Only the chief of a multi-worker group writes: the other workers keep the same oracle
  in memory and read the directory only at start-up (`set_writer(False)`).
- Keras 3 fails on a first batch that splits unevenly across replicas: see uneven.py.
- `keras.backend.clear_session()` resets Keras's global state, the dtype policy
  included, and keras-tuner calls it before building every model: a script's
  `keras.mixed_precision.set_global_policy("mixed_float16")` (or a spec's
  `tuner.dtypePolicy`) would silently train every trial in float32. The policy set
  before the call is set again after it.
- keras-tuner's `Oracle.reload` fills `trials` in the order the file system lists the
  trial directories, not the order they were created, and `get_best_trials` breaks ties
  by that order (BayesianOptimization also feeds its model in it). That order changes
  when other files of the project directory are written (measured: two workers of one
  trial group reading 15 ms apart while another group saved its tuner file got
  ['0', '1', '2'] and ['2', '0', '1']): a resumed search could name another best trial
  than an uninterrupted one, and the two workers built different "best" models (a
  collective shape mismatch). Reloaded trials are put back in creation order.
- GridSearch's walk of the grid survives a reload: gridsearch.py.
"""

from __future__ import annotations

import json
from typing import Any

from keras_tuner.src import utils as kt_utils
from tuneop_contract import write_atomic

from . import gridsearch, uneven

_state = {"write": True, "installed": False}


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


def install() -> None:
    """Idempotent."""
    if _state["installed"]:
        return
    _state["installed"] = True
    kt_utils.save_json = _atomic_save_json
    uneven.install()
    _keep_dtype_policy_across_clear_session()
    _reload_trials_in_creation_order()
    gridsearch.install()


def creation_order(trial_id: str) -> tuple[int, int, str]:
    """keras-tuner numbers trials as it creates them ("0", "01", ...); any other id
    comes after, by name."""
    return (0, int(trial_id), "") if trial_id.isdigit() else (1, 0, trial_id)


def in_creation_order(oracle: Any) -> None:
    oracle.trials = dict(sorted(oracle.trials.items(), key=lambda item: creation_order(item[0])))


def _reload_trials_in_creation_order() -> None:
    from keras_tuner.src.engine import oracle as oracle_module

    original = oracle_module.Oracle.reload

    def reload(self: Any) -> None:
        original(self)
        in_creation_order(self)

    oracle_module.Oracle.reload = reload


def _keep_dtype_policy_across_clear_session() -> None:
    import keras
    from keras.src.backend.common import global_state

    original = global_state.clear_session

    def clear_session(*args: Any, **kwargs: Any) -> Any:
        policy = global_state.get_global_attribute("dtype_policy", None)
        result = original(*args, **kwargs)
        if policy is not None:
            global_state.set_global_attribute("dtype_policy", policy)
        return result

    global_state.clear_session = clear_session
    keras.backend.clear_session = clear_session
    keras.utils.clear_session = clear_session
