"""Which part of a parallel search this process plays, from keras-tuner's variables.

No KERASTUNER_ORACLE_IP: a sequential search (`Role.parallel` is False, nothing changes).
KERASTUNER_TUNER_ID containing "chief" (keras-tuner's rule): the oracle. Anything else: a
trial group (`tuner<g>`); tuner0 is the one that runs what follows the search.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from tuneop_contract import (
    DEFAULT_ORACLE_PORT,
    ENV_ORACLE_IP,
    ENV_ORACLE_PORT,
    ENV_TRIAL_GROUPS,
    ENV_TUNER_ID,
    trial_group_tuner_id,
)

SEARCH_DONE_FILE = "search_done.json"
"""In the keras-tuner project directory, written (atomically) by the oracle once the
search is over: no trial is running or waiting and every trial group was told to stop."""

ENV_ORACLE_WAIT = "TUNEOP_ORACLE_WAIT_SECONDS"
"""How long a trial group keeps retrying an unreachable oracle before it exits 75."""
DEFAULT_ORACLE_WAIT_SECONDS = 600.0


class RoleDone(BaseException):
    """This process's part of the search is over and nothing after `search()` is its to
    run (the oracle after serving; a trial group other than tuner0 after STOPPED): exit 0.
    A BaseException, so neither keras-tuner nor a user's `except Exception` swallows it."""


@dataclasses.dataclass(frozen=True)
class Role:
    tuner_id: str | None = None  # None: sequential search
    oracle_address: str = ""
    oracle_port: int = DEFAULT_ORACLE_PORT
    trial_groups: int = 1
    oracle_wait_seconds: float = DEFAULT_ORACLE_WAIT_SECONDS

    @property
    def parallel(self) -> bool:
        return self.tuner_id is not None

    @property
    def is_oracle(self) -> bool:
        return self.tuner_id is not None and "chief" in self.tuner_id

    @property
    def is_group(self) -> bool:
        return self.parallel and not self.is_oracle

    @property
    def runs_post_search(self) -> bool:
        """The process that runs what follows `search()` (results, the final fit):
        tuner0 with parallel trials, the only process otherwise."""
        return not self.parallel or self.tuner_id == trial_group_tuner_id(0)

    @property
    def progress_id(self) -> str | None:
        """The tuner id this process reports progress under (None: the sequential key)."""
        return self.tuner_id

    def own_file(self, name: str) -> str:
        """A per-process state file's name: `name` sequentially, `stem.<tuner id>.ext`
        with parallel trials, so each trial group has its own (one writer per file)."""
        if not self.parallel:
            return name
        stem, dot, ext = name.rpartition(".")
        return f"{stem}.{self.tuner_id}.{ext}" if dot else f"{name}.{self.tuner_id}"


def from_env(environ: Mapping[str, str] | None = None) -> Role:
    env = os.environ if environ is None else environ
    address = env.get(ENV_ORACLE_IP)
    if not address:
        return Role()
    wait = float(env.get(ENV_ORACLE_WAIT) or DEFAULT_ORACLE_WAIT_SECONDS)
    return Role(
        tuner_id=env.get(ENV_TUNER_ID) or trial_group_tuner_id(0),
        oracle_address=address,
        oracle_port=int(env.get(ENV_ORACLE_PORT) or DEFAULT_ORACLE_PORT),
        trial_groups=max(1, int(env.get(ENV_TRIAL_GROUPS) or 1)),
        oracle_wait_seconds=wait,
    )


_role: list[Role] = []


def current() -> Role:
    """This process's role (read once)."""
    if not _role:
        _role.append(from_env())
    return _role[0]


def search_done_path(directory: str | os.PathLike[str], project_name: str) -> Path:
    return Path(directory) / project_name / SEARCH_DONE_FILE


def search_done(directory: str | os.PathLike[str], project_name: str) -> bool:
    return search_done_path(directory, project_name).exists()
