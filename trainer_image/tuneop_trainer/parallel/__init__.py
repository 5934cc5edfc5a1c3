"""Parallel trials: keras-tuner's own distributed tuning, made preemption-safe.

With KERASTUNER_ORACLE_IP set (the operator sets it for `spec.parallelTrials`), one
process is the oracle (tuner id "chief") and serves keras-tuner's oracle over gRPC; every
trial group (one pod, or a MultiWorkerMirrored group sharing a tuner id) runs trials as a
keras-tuner worker. The same command runs in every role; the role comes from the
environment, as in keras-tuner (`roles.py`).

- `oracle.py`: the oracle role. keras-tuner's oracle, changed so that a restarted oracle
  hands each returning trial group its own interrupted trial, ends a trial once however
  often a worker retries, and knows after a restart when the search is over; our serve
  loop instead of `oracle_chief.start_server`; the search-done marker.
- `client.py`: the trial-group role's `OracleClient`: every call survives an oracle
  restart (bounded retries), a trial named in TUNEOP_FAILED_TRIALS is ended FAILED
  without training, the done marker short-cuts a restarted group.
- `group.py`: a MultiWorkerMirrored group's barrier after each trial end, and what a
  group does when the oracle says STOPPED (tuner0 waits for the search to end and goes
  on with a read-only oracle; the others exit 0).

Each role's changes are installed by patches/ (the oracle's for the oracle, the client's
and the group's for a trial group); without KERASTUNER_ORACLE_IP none is, and the trainer
runs as before. This package's __init__ loads only `roles` (no keras-tuner), which the
command line reads.
"""

from __future__ import annotations

from typing import Any

from .roles import Role, RoleDone, current

__all__ = ["Role", "RoleDone", "config_oracle", "current", "local_oracle"]


def local_oracle(oracle: Any) -> Any | None:
    """The keras-tuner Oracle object with trials in this process: `oracle` itself, or
    None for a trial group's client (which has none; the oracle pod reports the counts)."""
    from keras_tuner.src.engine import oracle as oracle_module

    return oracle if isinstance(oracle, oracle_module.Oracle) else None


def config_oracle(oracle: Any) -> Any:
    """An Oracle object with the search's configuration (max_trials, Hyperband's
    factor, the seed): `oracle`, or a trial group client's local one."""
    return oracle.__dict__.get("_oracle", oracle)
