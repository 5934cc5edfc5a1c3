"""The oracle role: keras-tuner's oracle served over gRPC, safe to kill at any instant.

keras-tuner 1.4.8 (engine/oracle.py, distribute/oracle_chief.py), read in its source, and
what changes here (installed only in the oracle process):

- `Oracle.reload` sends every ongoing trial to the retry queue and empties
  `ongoing_trials`. With several trial groups the next group to ask would get another
  group's interrupted trial: run twice, and without its checkpoints' owner. Here each
  ongoing trial stays mapped to its tuner id across a reload, so `create_trial` hands a
  returning group its own trial (`ongoing_trials[tuner_id]`) and it resumes from its
  checkpoint. A mapping whose trial had already ended (its EndTrial saved, the kill
  came before keras-tuner popped it) is dropped instead.
- `end_trial` is idempotent: a group whose EndTrial reached an oracle that died before
  answering sends it again; the second one only clears what is left (the ongoing entry)
  and the trial is not appended to `end_order` or counted in `run_times` twice.
  `update_trial` likewise ignores a request whose values are already recorded at that
  step (keras-tuner would append them again to the step's observation).
- `tuner_ids` and "a STOPPED was handed out" are saved in oracle.json (keras-tuner keeps
  them in memory only), so a restarted oracle still knows when the search is over; and
  `create_trial` saves the state after every call (keras-tuner does not save when it
  hands out STOPPED).
- `oracle_chief.start_server` is replaced by `serve`: it binds 0.0.0.0 (keras-tuner binds
  KERASTUNER_ORACLE_IP, a name of the pod, not an address of it), runs enough gRPC
  threads for every trial group, checks at every trial end and STOPPED handed out (and
  every 0.5 s) instead of sleeping 20 s, ends when
  keras-tuner's own rule says the search is over (a STOPPED was handed out, no trial
  ongoing or waiting for a retry, no tuner id left), writes the search-done marker and
  the oracle's progress, and raises `RoleDone` so nothing after `search()` runs here
  (script mode: the post-search code belongs to tuner0). SIGTERM: stop serving, exit 75
  (every change is already saved atomically, patches/keras_tuner_files.py).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

from keras_tuner.src.engine import oracle as oracle_module
from keras_tuner.src.engine import trial as trial_module
from tuneop_contract import ENV_FAILED_TRIALS, now_rfc3339, parse_failed_trials, write_atomic

from .. import failed_trials, preemption
from . import roles

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
RUNNING = trial_module.TrialStatus.RUNNING
STOPPED = trial_module.TrialStatus.STOPPED

_state: dict[str, Any] = {"installed": False, "on_change": None}
_original: dict[str, Callable[..., Any]] = {}  # keras-tuner's Oracle methods, replaced
_changed = threading.Event()  # a STOPPED handed out or a trial ended: check at once


def install(on_change: Callable[[Any], None] | None = None) -> None:
    """Change keras-tuner's Oracle for the oracle role (idempotent). `on_change(oracle)`
    runs after every trial end (the progress report)."""
    _state["on_change"] = on_change
    if _state["installed"]:
        return
    _state["installed"] = True
    from keras_tuner.src.distribute import oracle_chief

    cls = oracle_module.Oracle
    for name, patched in (
        ("get_state", _get_state),
        ("set_state", _set_state),
        ("reload", _reload),
        ("create_trial", _create_trial),
        ("update_trial", _update_trial),
        ("end_trial", _end_trial),
    ):
        _original[name] = getattr(cls, name)
        setattr(cls, name, patched)
    oracle_chief.start_server = serve


def _locked(func: Callable[..., Any]) -> Callable[..., Any]:
    """keras-tuner's `synchronized` (one lock per oracle, re-entrant per thread, shared
    with keras-tuner's own methods), but released when the call raises: keras-tuner's
    leaves the lock held and the oracle deadlocked after any error in a call."""

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = threading.current_thread().name
        if oracle_module.THREADS[self] == name:
            return func(self, *args, **kwargs)
        with oracle_module.LOCKS[self]:
            oracle_module.THREADS[self] = name
            try:
                return func(self, *args, **kwargs)
            finally:
                oracle_module.THREADS[self] = None

    return wrapper


def _get_state(self: Any) -> dict[str, Any]:
    state: dict[str, Any] = _original["get_state"](self)
    state["tuneop_tuner_ids"] = sorted(self.tuner_ids)
    state["tuneop_stopped"] = bool(getattr(self, "_tuneop_stopped", False))
    return state


def _set_state(self: Any, state: dict[str, Any]) -> None:
    _original["set_state"](self, state)
    self.tuner_ids = set(state.get("tuneop_tuner_ids", []))
    self._tuneop_stopped = bool(state.get("tuneop_stopped", False))
    # what reload() is about to send to the retry queue
    self._tuneop_ongoing = dict(self.ongoing_trials)


def _reload(self: Any) -> None:
    _original["reload"](self)
    keep_ongoing(self, getattr(self, "_tuneop_ongoing", {}))


@_locked
def _create_trial(self: Any, tuner_id: str) -> Any:
    if getattr(self, "_tuneop_done", False):
        return trial_module.Trial(self.get_space(), status=STOPPED)
    trial = _original["create_trial"](self, tuner_id)
    if trial.status == STOPPED:
        self._tuneop_stopped = True
        _changed.set()
    self.save()
    return trial


@_locked
def _update_trial(self: Any, trial_id: str, metrics: dict[str, Any], step: int = 0) -> Any:
    trial = self.trials[trial_id]
    if metrics and all(_observed(trial, k, v, step) for k, v in metrics.items()):
        log.info("trial %s: update at step %s already recorded; ignored", trial_id, step)
        return trial
    return _original["update_trial"](self, trial_id, metrics, step=step)


@_locked
def _end_trial(self: Any, trial: Any) -> None:
    trial_id = trial.trial_id
    ongoing = [k for k, t in self.ongoing_trials.items() if t.trial_id == trial_id]
    queued = trial_id in self._retry_queue and not ongoing
    if trial_id in self.end_order or queued:
        for key in ongoing:
            self.ongoing_trials.pop(key)
        self.save()
        log.info("trial %s: end already recorded; repeated request ignored", trial_id)
        return
    failed_trials._known_to_display(self, trial_id)
    if trial.status == trial_module.TrialStatus.FAILED and not trial.message:
        # keras-tuner's proto has no message: a group's FAILED end of a trial the
        # operator named (TUNEOP_FAILED_TRIALS is on every pod) gets its reason here
        reason = parse_failed_trials(os.environ.get(ENV_FAILED_TRIALS)).get(trial_id)
        trial.message = failed_trials.message(reason) if reason else None
    _original["end_trial"](self, trial)
    self.save()  # keras-tuner pops the ongoing entry after its own save
    _changed.set()
    on_change = _state["on_change"]
    if on_change is not None:
        on_change(self)


def keep_ongoing(oracle: Any, ongoing: dict[str, Any]) -> None:
    """Undo what `Oracle.reload` did to the trials ongoing at the kill: each goes back
    to its tuner id, RUNNING, unless it had ended (in `end_order`, or queued for a retry
    by its own end) before the kill."""
    for tuner_id, trial in ongoing.items():
        trial_id = trial.trial_id
        if trial_id in oracle._retry_queue:
            oracle._retry_queue.remove(trial_id)  # the one reload() appended
        if trial_id in oracle.end_order or trial_id in oracle._retry_queue:
            log.info("trial %s (%s) had ended before the restart", trial_id, tuner_id)
            continue
        trial = oracle.trials[trial_id]
        trial.status = RUNNING
        oracle.ongoing_trials[tuner_id] = trial
        failed_trials._known_to_display(oracle, trial_id)
        log.info("trial %s stays with %s across the restart", trial_id, tuner_id)


def _observed(trial: Any, name: str, value: Any, step: int) -> bool:
    if not trial.metrics.exists(name):
        return False
    observation = trial.metrics.metrics[name]._observations.get(step)
    if observation is None:
        return False
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return all(v in observation.value for v in values)


@_locked
def search_over(oracle: Any) -> bool:
    """keras-tuner's rule (oracle_chief.exit_chief after a STOPPED), with the retry queue
    too: a trial waiting for a retry is not over."""
    return bool(
        getattr(oracle, "_tuneop_stopped", False)
        and not oracle.ongoing_trials
        and not oracle.tuner_ids
        and not oracle._retry_queue
    )


@_locked
def _finish(oracle: Any) -> None:
    """Write the marker under the oracle's lock: no trial can be created after it."""
    oracle._tuneop_done = True
    path = roles.search_done_path(oracle._directory, oracle._project_name)
    record = {"time": now_rfc3339(), "trials": len(oracle.trials), "endOrder": oracle.end_order}
    write_atomic(path, json.dumps(record).encode())


def serve(oracle: Any) -> None:
    """Serve `oracle` until the search is over (then raise RoleDone) or SIGTERM (raise
    Preempted). Replaces keras_tuner's `oracle_chief.start_server`."""
    import grpc
    from keras_tuner.src import protos
    from keras_tuner.src.distribute import oracle_chief

    role = roles.current()
    if roles.search_done(oracle._directory, oracle._project_name):
        log.info("the search is over (marker found); nothing to serve")
        raise roles.RoleDone()
    threads = max(4, 2 * role.trial_groups + 2)  # a MWMS group's workers all ask
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads))
    protos.get_service_grpc().add_OracleServicer_to_server(
        oracle_chief.OracleServicer(oracle), server
    )
    address = f"0.0.0.0:{role.oracle_port}"
    server.add_insecure_port(address)
    server.start()
    log.info(
        "oracle serving on %s for %d trial group(s), %d gRPC threads",
        address,
        role.trial_groups,
        threads,
    )
    try:
        while not search_over(oracle):
            if preemption.requested():
                log.warning("oracle: SIGTERM; stop serving (its state is on the volume)")
                raise preemption.Preempted()
            _changed.wait(POLL_SECONDS)
            _changed.clear()
        _finish(oracle)
        log.info("search over: %d trials, none running; oracle exits", len(oracle.trials))
        on_change = _state["on_change"]
        if on_change is not None:
            on_change(oracle)
    finally:
        server.stop(grace=1.0).wait()
    raise roles.RoleDone()
