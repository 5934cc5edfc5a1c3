"""TuningJob.status as the operator reads and writes it: the name of every key (one
place per key; the CRD's status schema declares them), the phases, the conditions per
the Kubernetes API conventions (lastTransitionTime changed only when `status` flips,
observedGeneration), and typed readers of what the operator wrote (status is writable by
others: a value of the wrong type reads as none instead of raising on every pass)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import tuneop_contract as contract

Obj = dict[str, Any]

# --- keys of TuningJob.status -------------------------------------------------------
OBSERVED_GENERATION = "observedGeneration"
PHASE = "phase"
MESSAGE = "message"
CONDITIONS = "conditions"
TRIALS = "trials"
""""done/total" (total "?" until the trainer knows it)."""
TRIALS_COMPLETED = "trialsCompleted"
TRIALS_TOTAL = "trialsTotal"
CURRENT_TRIAL = "currentTrial"
BEST_TRIAL = "bestTrial"
TOP_TRIALS = "topTrials"
RESULT_SOURCE = "resultSource"
"""Where the final trials and bestTrial came from (TerminationMessage or Progress)."""
PROGRESS = "progress"
"""The trainer's last record, copied field by field (api.progress)."""
PREEMPTIONS = "preemptions"
FAILURES = "failures"
TRIAL_OOMS = "trialOOMs"
OOM_TRIALS = "oomTrials"
"""Ids of the trials that ran out of memory, oldest first."""
RESTARTS = "restarts"
RESTORES = "restores"
STALL_RESTARTS = "stallRestarts"
QUEUE_EVICTIONS = "queueEvictions"
ATTEMPT = "attempt"
"""The sequential group's pod group index (its pods' tuneop.io/attempt)."""
ATTEMPT_STARTED = "attemptStarted"
ATTEMPT_START_TIME = "attemptStartTime"
RESTORED_ATTEMPT = "restoredAttempt"
"""The pod group whose restore was reported (once per group)."""
RESTORE_BASELINE = "restoreBaseline"
"""The trainer's `restores` count when the group was created."""
NEXT_RETRY_TIME = "nextRetryTime"
PODS_REFUSED = "podsRefused"
"""While the API server refuses to create the group's pods or children: {reason, since}
(decide.refusal); gone once the group is created."""
LAST_PROGRESS_TIME = "lastProgressTime"
LAST_CHECKPOINT_TIME = "lastCheckpointTime"
START_TIME = "startTime"
"""The job's first pod group (in a status.groups entry: that group's)."""
COMPLETION_TIME = "completionTime"
GOODPUT = "goodput"
SHAPE = "shape"
"""The shape in use with spec.distribution.elastic: {index, name, workers,
gpusPerWorker, gpus} (index 0: the job's own)."""
GROUPS = "groups"
"""A parallel job's pod groups, one entry each (the GROUP_* keys)."""

REPORTED = frozenset(
    (PROGRESS, LAST_PROGRESS_TIME, LAST_CHECKPOINT_TIME, CURRENT_TRIAL, TRIALS_COMPLETED,
     TRIALS_TOTAL, BEST_TRIAL, GOODPUT)
)  # fmt: skip
"""Keys that only show what the trainer reported (and the goodput it adds up to): a pass
that writes no other key leaves nothing for the next pass to carry on."""
COUNTERS = (PREEMPTIONS, FAILURES, TRIAL_OOMS, RESTARTS, RESTORES)
"""Counters every job's status shows from its first pass (0 until counted)."""

# --- keys of a status.groups entry (besides ATTEMPT, START_TIME, NEXT_RETRY_TIME, PODS_REFUSED,
# RESTORED_ATTEMPT, RESTORE_BASELINE, LAST_PROGRESS_TIME, LAST_CHECKPOINT_TIME and the
# per-group PREEMPTIONS, FAILURES, RESTARTS, RESTORES, QUEUE_EVICTIONS, MESSAGE) --------
GROUP_NAME = "name"
GROUP_STARTED = "started"
GROUP_STATE = "state"
GROUP_COMPLETED = "completed"
GROUP_TRIAL_ID = "trialId"
GROUP_EPOCH = "epoch"
GROUP_STEP = "step"
REFUSED_REASON = "reason"
REFUSED_SINCE = "since"
"""Keys of PODS_REFUSED."""

KEYS = frozenset(
    (OBSERVED_GENERATION, PHASE, MESSAGE, CONDITIONS, TRIALS, TRIALS_COMPLETED, TRIALS_TOTAL,
     CURRENT_TRIAL, BEST_TRIAL, TOP_TRIALS, RESULT_SOURCE, PROGRESS, PREEMPTIONS, FAILURES,
     TRIAL_OOMS, OOM_TRIALS, RESTARTS, RESTORES, STALL_RESTARTS, QUEUE_EVICTIONS, ATTEMPT,
     ATTEMPT_STARTED, ATTEMPT_START_TIME, RESTORED_ATTEMPT, RESTORE_BASELINE, NEXT_RETRY_TIME,
     PODS_REFUSED, LAST_PROGRESS_TIME, LAST_CHECKPOINT_TIME, START_TIME, COMPLETION_TIME,
     GOODPUT, SHAPE, GROUPS)
)  # fmt: skip
"""Every key of TuningJob.status the operator writes: the status patch takes no other
(decide.patch), and the CRD's status schema declares each (tests/unit/test_operator_crd.py)."""
GROUP_KEYS = frozenset(
    (GROUP_NAME, GROUP_STARTED, GROUP_STATE, GROUP_COMPLETED, GROUP_TRIAL_ID, GROUP_EPOCH,
     GROUP_STEP, ATTEMPT, START_TIME, NEXT_RETRY_TIME, PODS_REFUSED, RESTORED_ATTEMPT,
     RESTORE_BASELINE, LAST_PROGRESS_TIME, LAST_CHECKPOINT_TIME, PREEMPTIONS, FAILURES,
     RESTARTS, RESTORES, QUEUE_EVICTIONS, MESSAGE)
)  # fmt: skip
"""Every key of a status.groups entry the operator writes (decide.slot takes no other)."""

# --- keys of status.goodput (decide.goodput) ----------------------------------------
GOODPUT_ALLOCATED = "allocatedGpuSeconds"
GOODPUT_LOST = "lostGpuSeconds"
GOODPUT_ENDED = "endedGpuSeconds"
"""GPU time of the pod groups that ended (the running ones' is added for ALLOCATED)."""
GOODPUT_PERCENT = "percent"
GOODPUT_RECOVERIES = "recoveries"
GOODPUT_LAST_RECOVERY = "lastRecoverySeconds"
GOODPUT_PENDING = "pending"
"""Losses whose recovery is still open, by group."""
GOODPUT_UPDATED = "updated"

PHASE_PENDING = "Pending"
PHASE_RUNNING = "Running"
PHASE_SUSPENDED = "Suspended"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
PHASES = (PHASE_PENDING, PHASE_RUNNING, PHASE_SUSPENDED, PHASE_SUCCEEDED, PHASE_FAILED)
TERMINAL_PHASES = (PHASE_SUCCEEDED, PHASE_FAILED)

COND_RUNNING = "Running"
COND_SUSPENDED = "Suspended"
COND_STALLED = "Stalled"
COND_COMPLETE = "Complete"
COND_FAILED = "Failed"
COND_QUEUED = "Queued"
"""True while Kueue has not admitted the job's pod group (reason Queued, Kueue's message)."""
CONDITION_TYPES = (
    COND_RUNNING,
    COND_QUEUED,
    COND_SUSPENDED,
    COND_STALLED,
    COND_COMPLETE,
    COND_FAILED,
)


def rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def get_condition(conditions: list[Obj], type_: str) -> Obj | None:
    for cond in conditions:
        if cond.get("type") == type_:
            return cond
    return None


def set_condition(
    conditions: list[Obj],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: dt.datetime,
) -> list[Obj]:
    """A new list with condition `type_` set; lastTransitionTime moves only when the
    status changes. Order: the fixed CONDITION_TYPES order, unknown types after."""
    value = "True" if status else "False"
    old = get_condition(conditions, type_)
    transition = (
        old["lastTransitionTime"]
        if old and old.get("status") == value and old.get("lastTransitionTime")
        else rfc3339(now)
    )
    new = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
        "observedGeneration": generation,
    }
    others = [c for c in conditions if c.get("type") != type_]
    merged = [*others, new]
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(merged, key=lambda c: order.get(str(c.get("type")), len(order)))


def condition_is(conditions: list[Obj], type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return bool(cond and cond.get("status") == "True")


def int_of(value: Any) -> int:
    """An integer the operator wrote into status; anything else (status is writable by
    others) reads as 0 instead of raising on every pass."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    try:
        return int(value) if isinstance(value, (str, float)) else 0
    except (ValueError, OverflowError):
        return 0


def mtbf_seconds(status: Obj, groups: int, now: dt.datetime) -> float:
    """The job's mean time between disruptions so far (contract.mtbf_estimate): the time
    of its `groups` pod groups (each can be disrupted) since `startTime`, over
    `preemptions`. Time a lost group waited to be recreated counts as running time too:
    a slight overestimate, small beside the prior's uncertainty."""
    start = parse_time(status.get(START_TIME))
    running = max(0.0, (now - start).total_seconds()) if start is not None else 0.0
    preemptions = status.get(PREEMPTIONS)
    if not isinstance(preemptions, int) or isinstance(preemptions, bool):
        preemptions = 0
    return contract.mtbf_estimate(running * groups, preemptions)


def oom_trials(status: Obj) -> list[str]:
    """`status.oomTrials`: the trials whose trainer ran out of memory, oldest first
    (anything but a list of ids reads as none)."""
    value = status.get(OOM_TRIALS)
    if not isinstance(value, list):
        return []
    return [str(v) for v in value if isinstance(v, (str, int)) and not isinstance(v, bool)]
