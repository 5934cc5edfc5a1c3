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

Without KERASTUNER_ORACLE_IP nothing here is installed and the trainer runs as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .roles import Role, RoleDone, current

__all__ = ["Role", "RoleDone", "current", "install", "local_oracle"]


def install(role: Role, on_oracle_change: Callable[[Any], None] | None = None) -> None:
    """keras-tuner's changes for `role` (nothing for a sequential search)."""
    if role.is_oracle:
        from . import oracle

        oracle.install(on_oracle_change)
    elif role.is_group:
        from . import client, group

        client.install()
        group.install()


def local_oracle(oracle: Any) -> Any | None:
    """The keras-tuner Oracle object with trials in this process: `oracle` itself, or
    None for a trial group's client (which has none; the oracle pod reports the counts)."""
    from keras_tuner.src.engine import oracle as oracle_module

    return oracle if isinstance(oracle, oracle_module.Oracle) else None


def config_oracle(oracle: Any) -> Any:
    """An Oracle object with the search's configuration (max_trials, Hyperband's
    factor, the seed): `oracle`, or a trial group client's local one."""
    return oracle.__dict__.get("_oracle", oracle)
