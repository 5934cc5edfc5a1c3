"""The trial-group role's oracle client: keras-tuner's `OracleClient`, made to outlive
an oracle restart.

keras-tuner 1.4.8's client (distribute/oracle_client.py) calls the chief with
`wait_for_ready=True` and a one-hour timeout and never retries: a call in flight when the
oracle pod dies fails with UNAVAILABLE and the trial group with it, and a call made while
it is away waits up to an hour. gRPC's default reconnect backoff grows to 120 s, so a
group would also notice a recreated oracle late. Here:

- every call is retried on UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED and
  RESOURCE_EXHAUSTED (what an oracle going away or coming back looks like), one log line
  per retry, with a backoff from 0.5 s to 5 s after a failed call (none after an attempt
  that timed out waiting for the oracle); each attempt is bounded by 10 s, so a SIGTERM
  while waiting ends in exit 75 within the grace period (a slow call cut short is simply
  asked again). When the oracle has been unreachable for TUNEOP_ORACLE_WAIT_SECONDS
  (default 600) the group raises `OracleUnreachable`, a `Preempted`: exit 75, the group
  is not at fault, the operator recreates it and it resumes its trial from its
  checkpoint. Every call is safe to repeat: `create_trial` returns the tuner id's ongoing
  trial, `end_trial` and `update_trial` are idempotent on our oracle (oracle.py).
- the channel reconnects every 0.25-0.5 s, so a recreated oracle is seen within seconds.
- with the search-done marker on the volume, `create_trial` answers STOPPED without
  contacting the oracle (a group restarted after the oracle exited, or one whose
  oracle went away for good once the search was over).
- a trial named in TUNEOP_FAILED_TRIALS (its trainer ran out of memory) is ended FAILED
  through the oracle (keras-tuner's `end_trial` with status FAILED, never retried) and
  the next one is asked for, without training it.
- IDLE (Hyperband waiting for a bracket's other trials) is answered after 0.5 s: keras-
  tuner's search loop asks again at once, which would spin on the oracle.

The running trial's training never talks to the oracle (results are reported when it
ends), so an oracle restart costs a training step nothing.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import grpc
from keras_tuner.src import protos
from keras_tuner.src.distribute import oracle_client
from keras_tuner.src.engine import hyperparameters as hp_module
from keras_tuner.src.engine import trial as trial_module
from tuneop_contract import ENV_FAILED_TRIALS, parse_failed_trials

from .. import failed_trials, preemption
from . import roles

log = logging.getLogger(__name__)

ATTEMPT_SECONDS = 10.0  # short: a SIGTERM is seen between attempts
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 5.0
IDLE_SECONDS = 0.5
SLOW_SECONDS = 1.0  # a call that took longer is logged with its time

_installed = [False]

RETRY_CODES = {  # what an oracle going away or coming back looks like
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}


class OracleUnreachable(preemption.Preempted):
    """The oracle stayed unreachable past the bound: exit 75 and be recreated."""


def install() -> None:
    """keras-tuner's BaseTuner wraps a worker's oracle in `oracle_client.OracleClient`,
    looked up at that moment: ours from now on (idempotent)."""
    if _installed[0]:
        return
    _installed[0] = True
    oracle_client.OracleClient = RetryingOracleClient


def _service() -> Any:
    return protos.get_service()


class RetryingOracleClient(oracle_client.OracleClient):  # type: ignore[misc]
    def __init__(self, oracle: Any) -> None:
        role = roles.current()
        self._oracle = oracle
        self.tuner_id = role.tuner_id
        self.multi_worker = False
        self.should_report = True
        self._wait = role.oracle_wait_seconds
        self._failed = parse_failed_trials(os.environ.get(ENV_FAILED_TRIALS))
        channel = grpc.insecure_channel(
            f"{role.oracle_address}:{role.oracle_port}",
            options=[
                ("grpc.initial_reconnect_backoff_ms", 250),
                ("grpc.min_reconnect_backoff_ms", 250),
                ("grpc.max_reconnect_backoff_ms", 500),
            ],
        )
        self.stub = protos.get_service_grpc().OracleStub(channel)

    # -- the retry ----------------------------------------------------------
    def _call(self, name: str, request: Any, stop_if_done: bool = False) -> Any:
        method: Callable[..., Any] = getattr(self.stub, name)
        start = time.monotonic()
        deadline = start + self._wait
        attempt = 0
        while True:
            if stop_if_done and self._search_done():
                return None
            if preemption.requested():
                raise preemption.Preempted()
            remaining = deadline - time.monotonic()
            try:
                response = method(
                    request,
                    wait_for_ready=True,
                    timeout=max(1.0, min(ATTEMPT_SECONDS, remaining)),
                )
                waited = time.monotonic() - start
                if attempt or waited > SLOW_SECONDS:  # the oracle was away
                    log.info("oracle %s: answered after %.3fs", name, waited)
                return response
            except grpc.RpcError as exc:
                code = exc.code()
                if code not in RETRY_CODES:
                    raise
                if time.monotonic() >= deadline:
                    message = (
                        f"oracle {roles.current().oracle_address} unreachable for "
                        f"{self._wait:.0f}s ({roles.ENV_ORACLE_WAIT}); exit to be recreated"
                    )
                    log.error(message)
                    raise OracleUnreachable(message) from exc
                attempt += 1
                delay = min(BACKOFF_FIRST * 2 ** (attempt - 1), BACKOFF_MAX)
                if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    delay = 0.0  # the attempt itself waited for the oracle
                log.warning("oracle %s: %s; retry %d in %.1fs", name, code.name, attempt, delay)
                time.sleep(delay)

    def _search_done(self) -> bool:
        local = self._oracle
        return roles.search_done(local._directory, local._project_name)

    # -- keras-tuner's calls ----------------------------------------------------
    def get_space(self) -> Any:
        response = self._call("GetSpace", _service().GetSpaceRequest())
        return hp_module.HyperParameters.from_proto(response.hyperparameters)

    def update_space(self, hyperparameters: Any) -> None:
        if self.should_report:
            request = _service().UpdateSpaceRequest(hyperparameters=hyperparameters.to_proto())
            self._call("UpdateSpace", request)

    def create_trial(self, tuner_id: str) -> Any:
        repeated = None
        while True:
            request = _service().CreateTrialRequest(tuner_id=tuner_id)
            response = self._call("CreateTrial", request, stop_if_done=True)
            if response is None:
                log.info("the search is over (marker on the volume); not asking the oracle")
                return trial_module.Trial(self._oracle.get_space(), status="STOPPED")
            trial = trial_module.Trial.from_proto(response.trial)
            if trial.status == trial_module.TrialStatus.IDLE:
                time.sleep(IDLE_SECONDS)
                return trial
            reason = self._failed.get(str(trial.trial_id))
            if trial.status != trial_module.TrialStatus.RUNNING or reason is None:
                return trial
            if repeated != trial.trial_id:
                trial.status = trial_module.TrialStatus.FAILED
                trial.message = failed_trials.message(reason)
                log.warning(
                    "trial %s: %s; ended FAILED, not trained", trial.trial_id, trial.message
                )
                self.end_trial(trial)
            else:  # a non-reporting worker: the group's chief ends it
                time.sleep(IDLE_SECONDS)
            repeated = trial.trial_id

    def update_trial(self, trial_id: str, metrics: dict[str, Any], step: int = 0) -> Any:
        if self.should_report:
            request = _service().UpdateTrialRequest(trial_id=trial_id, metrics=metrics, step=step)
            response = self._call("UpdateTrial", request)
            if not self.multi_worker:
                return trial_module.Trial.from_proto(response.trial)
        return trial_module.Trial(self.get_space(), status="RUNNING")

    def end_trial(self, trial: Any) -> None:
        if self.should_report:
            self._call("EndTrial", _service().EndTrialRequest(trial=trial.to_proto()))

    def get_trial(self, trial_id: str) -> Any:
        response = self._call("GetTrial", _service().GetTrialRequest(trial_id=trial_id))
        return trial_module.Trial.from_proto(response.trial)

    def get_best_trials(self, num_trials: int = 1) -> list[Any]:
        request = _service().GetBestTrialsRequest(num_trials=num_trials)
        response = self._call("GetBestTrials", request)
        return [trial_module.Trial.from_proto(t) for t in response.trials]
