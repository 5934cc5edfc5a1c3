"""What a pod group that ended on its own costs the job, and the job's budgets for it
(`spec.failurePolicy`): a disruption is a preemption (`maxPreemptions`, the group
recreated at once), a trainer's failure is a failure (`maxFailures`, the group
recreated after a backoff), a trial that ran out of memory is recorded FAILED
(`maxTrialOOMs`, the group recreated at once, the failure budget untouched). A spent
budget ends the job Failed. The counters move in the status patch that also moves the
group's pod group index, written before its pods are deleted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from ..api import queue
from ..api import status as st
from ..api.progress import ProgressView
from ..render import children
from .classify import TRAINER_EXITS, VOLUME_ERROR, Classification, Outcome
from .job import delete_alive, finish
from .patch import Draft
from .slot import GroupResult, Slot, last_checkpoint

Obj = dict[str, Any]

TRIAL_OOM = "TrialOutOfMemory"
"""Reason (Event, condition Running) of a trial recorded FAILED for running out of memory."""


def preemption_wins(outcomes: Mapping[str, Classification]) -> bool:
    """The group counts as preempted: a worker was disrupted from outside (its peers'
    crashes are collateral), or workers stopped with the trainer's exit 75 and none
    failed. Peers' exit 75 never masks a real failure (OOMKilled, an error exit) of one
    worker: that trial would otherwise be retried for ever on the preemption budget."""
    preempted = [c for c in outcomes.values() if c.outcome == Outcome.PREEMPTED]
    if not preempted:
        return False
    external = any(c.reason not in TRAINER_EXITS for c in preempted)
    failed = any(c.outcome == Outcome.FAILED for c in outcomes.values())
    return external or not failed


def count_preemption(
    draft: Draft,
    slot: Slot,
    outcomes: Mapping[str, Classification],
    group: list[Obj],
    held: list[Obj],
) -> GroupResult:
    """The group was disrupted: one preemption (and a Kueue eviction when Kueue took
    its quota back), its GPU time closed and its loss opened in the goodput ledger; the
    group is recreated at once, or the job fails past maxPreemptions. Disruption wins:
    other workers of a MultiWorkerMirrored group often crash (exit 1) once a peer is
    gone, which is not their failure."""
    spec = draft.spec
    fp = spec.failure_policy
    gpus = slot.gpus_per_pod
    what = ", ".join(
        f"{n}: {c.reason}" + (f" ({c.message})" if c.reason in TOLD and c.message else "")
        for n, c in outcomes.items()
        if c.outcome == Outcome.PREEMPTED
    )
    preemptions = draft.count(st.PREEMPTIONS)
    slot.count(st.PREEMPTIONS)
    if any(c.reason == queue.EVICTED_BY_KUEUE for c in outcomes.values()):
        draft.count(st.QUEUE_EVICTIONS)  # Kueue took the quota back (a preemption too)
        slot.count(st.QUEUE_EVICTIONS)
    delete_alive(draft, group)
    draft.ledger.close(held, gpus)
    reason = next(c.reason for c in outcomes.values() if c.outcome == Outcome.PREEMPTED)
    draft.ledger.disrupted(
        slot.group.name, last_checkpoint(draft, slot), reason, gpus * len(slot.group.pod_names)
    )
    if preemptions > fp.max_preemptions:
        finish(
            draft,
            succeeded=False,
            reason="PreemptionBudgetExceeded",
            message=f"{preemptions} preemptions exceed failurePolicy.maxPreemptions="
            f"{fp.max_preemptions}; last: {what}",
        )
        return GroupResult("ended")
    if any(c.reason == VOLUME_ERROR for c in outcomes.values()):
        return _volume_backoff(draft, slot, what, preemptions)
    _recreate_preempted(draft, slot, what)
    return GroupResult(
        "recreate",
        "Preempted",
        what,
        f"preempted ({what}); recreating the {slot.label} pod group",
    )


TOLD = (queue.EVICTED_BY_KUEUE, VOLUME_ERROR)
"""Preemption reasons whose message the Event and the status repeat."""


def _volume_backoff(draft: Draft, slot: Slot, what: str, preemptions: int) -> GroupResult:
    """The checkpoint volume refused a write (full, most often): nothing was lost, but
    a group started at once would fail the same way until the volume has room, and
    spend the preemption budget in a minute. The group is recreated after the failure
    policy's backoff for the preemptions so far (10 s, doubling, capped), with a Warning
    Event that names the volume's message; the budget still bounds the retries."""
    delay = draft.spec.failure_policy.backoff(preemptions)
    claim = children.claim_name(draft.seen.job, draft.spec)
    draft.event(
        "Warning",
        VOLUME_ERROR,
        f"{slot.label} pod group {slot.attempt} stopped: {what}; make room on claim "
        f"{claim} (or expand it); retrying in {delay}s",
    )
    slot.restart()
    slot.put(st.NEXT_RETRY_TIME, st.rfc3339(draft.now + dt.timedelta(seconds=delay)))
    draft.decision.wake_within(delay)
    return GroupResult(
        "recreate", VOLUME_ERROR, what, f"checkpoint volume error ({what}); retrying in {delay}s"
    )


def _recreate_preempted(draft: Draft, slot: Slot, what: str) -> None:
    """The Preempted Event saying what is recreated and how it resumes; a new pod group."""
    if slot.entry is None:
        how = "all workers" if len(slot.group.pod_names) > 1 else "the trainer"
    else:
        how = "it alone (the other groups keep running)"
    resumes = "it resumes from the checkpoint"
    if slot.entry is not None and not slot.group.oracle:
        resumes = "it resumes its trial from the checkpoint"
    draft.event(
        "Warning",
        "Preempted",
        f"{slot.label} pod group {slot.attempt} disrupted ({what}); recreating {how}, {resumes}",
    )
    slot.restart()


def count_failure(
    draft: Draft,
    slot: Slot,
    outcomes: Mapping[str, Classification],
    group: list[Obj],
    held: list[Obj],
) -> GroupResult:
    """A trainer of the group failed: one failure, the group recreated after the
    backoff (`status.nextRetryTime`), or the job fails past maxFailures."""
    spec = draft.spec
    fp = spec.failure_policy
    what = "; ".join(
        f"{n}: {c.reason}: {c.message}" for n, c in outcomes.items() if c.outcome == Outcome.FAILED
    )
    failures = draft.count(st.FAILURES)
    slot.count(st.FAILURES)
    delete_alive(draft, group)
    draft.ledger.close(held, slot.gpus_per_pod)
    if failures > fp.max_failures:
        finish(
            draft,
            succeeded=False,
            reason="FailureBudgetExceeded",
            message=f"{failures} trainer failures exceed failurePolicy.maxFailures="
            f"{fp.max_failures}; last: {what}",
        )
        return GroupResult("ended")
    delay = fp.backoff(failures)
    draft.event(
        "Warning",
        "TrainerFailed",
        f"{slot.label} failed ({failures}/{fp.max_failures} tolerated): {what}; retry in {delay}s",
    )
    slot.restart()
    slot.put(st.NEXT_RETRY_TIME, st.rfc3339(draft.now + dt.timedelta(seconds=delay)))
    draft.decision.wake_within(delay)
    return GroupResult(
        "recreate",
        "TrainerFailed",
        what,
        f"{slot.label} failed: {what}; retrying in {delay}s",
    )


def trial_out_of_memory(
    draft: Draft, outcomes: Mapping[str, Classification], progress: ProgressView
) -> bool:
    """A worker of the group ran out of memory while the trainer was in a trial it
    named, not yet recorded as out of memory: that trial is infeasible on these pods,
    not the trainer's failure. An OOM before the first trial, or naming a trial the
    operator already recorded (the next trainer ran out of memory before it reported a
    new one, or did not honour the record), stays a failure."""
    trial = progress.text("trialId")
    if not trial or trial in st.oom_trials({st.OOM_TRIALS: draft.get(st.OOM_TRIALS)}):
        return False
    return any(c.outcome == Outcome.FAILED and c.out_of_memory for c in outcomes.values())


def record_trial_oom(
    draft: Draft,
    slot: Slot,
    outcomes: Mapping[str, Classification],
    progress: ProgressView,
    group: list[Obj],
    held: list[Obj],
) -> GroupResult:
    """Record the running trial in status.oomTrials (the next pods get it in
    TUNEOP_FAILED_TRIALS and mark it FAILED in the oracle), count it in trialOOMs, and
    recreate the group at once: no backoff, the failure budget untouched. More than
    failurePolicy.maxTrialOOMs such trials end the job."""
    spec = draft.spec
    trial = str(progress.text("trialId"))
    fp = spec.failure_policy
    who = ", ".join(
        f"{n}: exit {c.exit_code}" if c.reason != "OOMKilled" else f"{n}: OOMKilled"
        for n, c in outcomes.items()
        if c.outcome == Outcome.FAILED and c.out_of_memory
    )
    ooms = draft.count(st.TRIAL_OOMS)
    recorded = st.oom_trials({st.OOM_TRIALS: draft.get(st.OOM_TRIALS)})
    draft.put(st.OOM_TRIALS, [*recorded, trial])
    delete_alive(draft, group)
    draft.ledger.close(held, slot.gpus_per_pod)
    limits = (spec.resources.get("limits") or {}).get("memory")
    memory = f" (limit {limits})" if limits else ""
    advice = (
        f"raise spec.resources.limits.memory{memory} (and requests.memory), or shrink the "
        "search space (the hyperparameter ranges or batch size that make the model this large)"
    )
    if ooms > fp.max_trial_ooms:
        finish(
            draft,
            succeeded=False,
            reason="TrialOOMBudgetExceeded",
            message=f"{ooms} trials ran out of memory, more than failurePolicy.maxTrialOOMs="
            f"{fp.max_trial_ooms}; last: trial {trial} ({who}); {advice}",
        )
        return GroupResult("ended")
    draft.event(
        "Warning",
        TRIAL_OOM,
        f"trial {trial} ran out of memory ({who}); it is recorded FAILED and the search "
        f"goes on with the next trial ({ooms}/{fp.max_trial_ooms} tolerated); {advice}",
    )
    slot.restart()
    slot.put(st.NEXT_RETRY_TIME, None)
    return GroupResult(
        "recreate",
        TRIAL_OOM,
        f"trial {trial} ran out of memory ({who})",
        f"trial {trial} ran out of memory; recreating the {slot.label} pod group",
    )
