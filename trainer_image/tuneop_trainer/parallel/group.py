"""The trial-group role's changes to keras-tuner's search loop.

After each trial (MultiWorkerMirrored group): a cross-worker barrier once the chief's
`end_trial` has returned. Only the group's chief reports (keras-tuner's `should_report`);
without the barrier a faster non-chief worker could ask `create_trial` before the
chief's end landed and be handed the ended trial again (the tuner id's ongoing one).

Once the oracle hands out STOPPED, keras-tuner's `search()` simply returns on every
worker, and the script's post-search code (`get_best_models`, a final `fit`) would then
run in every trial group, against an `OracleClient` that has no trials, and race for the
same files. Here:

- every group but tuner0 raises `RoleDone` (exit 0): its part is over;
- tuner0 waits until the search is over - the oracle's search-done marker on the
  volume, written once no trial is running or waiting - then replaces its client by its
  own local keras-tuner Oracle reloaded from the volume, read-only (its `save` and
  `_save_trial` do nothing: oracle.json and the trial files have one writer, the oracle),
  and returns from `search()`: spec mode writes results.json and best_model.keras, a
  script's post-search code runs, here only.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from .. import preemption
from ..strategy import barrier
from . import roles

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
LOG_EVERY_SECONDS = 60.0

_installed = [False]


def install() -> None:
    """Wrap BaseTuner.search and on_trial_end for the trial-group role (idempotent)."""
    if _installed[0]:
        return
    _installed[0] = True
    from keras_tuner.src.engine import base_tuner

    original = base_tuner.BaseTuner.search

    @functools.wraps(original)
    def search(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        role = roles.current()
        local = getattr(self.oracle, "_oracle", None)
        if not role.is_group or local is None:
            return result
        if not role.runs_post_search:
            log.info("%s: the oracle stopped this trial group; exit 0", role.tuner_id)
            raise roles.RoleDone()
        wait_for_search_end(local)
        self.oracle = read_only(local)
        log.info(
            "%s: search over, %d trials; post-search code runs here",
            role.tuner_id,
            len(self.oracle.trials),
        )
        return result

    base_tuner.BaseTuner.search = search

    original_end = base_tuner.BaseTuner.on_trial_end

    @functools.wraps(original_end)
    def on_trial_end(self: Any, trial: Any) -> None:
        original_end(self, trial)
        barrier(getattr(self, "distribution_strategy", None))

    base_tuner.BaseTuner.on_trial_end = on_trial_end


def wait_for_search_end(local: Any) -> None:
    """Until the oracle's search-done marker exists (the other groups' trials may still
    be running: no bound, a log line every minute)."""
    start = last = time.monotonic()
    while not roles.search_done(local._directory, local._project_name):
        if preemption.requested():
            raise preemption.Preempted()
        now = time.monotonic()
        if now - last >= LOG_EVERY_SECONDS:
            log.info("waiting for the other trial groups' trials (%.0fs)", now - start)
            last = now
        time.sleep(POLL_SECONDS)


def read_only(local: Any) -> Any:
    """`local` (this process's own Oracle object) reloaded from the volume, never
    writing it."""
    local.save = lambda *a, **k: None
    local._save_trial = lambda *a, **k: None
    local.reload()
    local.ongoing_trials = {}
    return local
