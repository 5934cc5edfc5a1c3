"""The rules for one pod group, shared by sequential and parallel jobs: start it (after
any backoff), classify its pods, say what they show (completed, disrupted, failed,
terminating, running, pending) and count what it costs (decide.budgets), report a
restore, say whether Kueue holds it. Its bookkeeping is a `Slot` (decide.slot)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api import queue
from ..api import status as st
from ..api.progress import ProgressView
from . import budgets
from .classify import (
    STUCK_WAITING_REASONS,
    TERMINATING_ON_UNREACHABLE_NODE,
    UNSCHEDULABLE,
    Classification,
    Outcome,
    attempt_of,
    classify,
    classify_missing,
    deletion_due,
)
from .patch import UNWATCHED_RECHECK_SECONDS, Draft
from .peers import wait_for_peers
from .slot import GroupResult, Slot

Obj = dict[str, Any]

PODS_PENDING = "PodsPending"
STUCK = (*STUCK_WAITING_REASONS, UNSCHEDULABLE)
"""Pending reasons named in the Running condition (and in Stalled once they last)."""


def backoff_wait(draft: Draft, slot: Slot) -> str | None:
    """While the group's backoff runs (after a trainer's failure, or the checkpoint
    volume refusing a write): the message to show (and the pass is requeued for its
    end)."""
    retry = st.parse_time(slot.get(st.NEXT_RETRY_TIME))
    if retry is None or draft.now >= retry:
        return None
    wait = (retry - draft.now).total_seconds()
    draft.decision.wake_within(wait)
    return f"retrying at {st.rfc3339(retry)} (backing off)"


def start_group(draft: Draft, slot: Slot) -> None:
    """Create the group's pods (pod group index `slot.attempt`)."""
    attempt = slot.attempt
    draft.decision.ensure_children = True
    if slot.entry is None:
        draft.decision.create_pods = list(range(len(slot.group.pod_names)))
        draft.decision.create_attempt = attempt
    else:
        draft.decision.create_groups.append((slot.group.name, attempt))
    if slot.entry is None and st.condition_is(draft.conditions, st.COND_STALLED):
        draft.cond(st.COND_STALLED, False, "NewPodGroup", "")
    slot.put(st.ATTEMPT, attempt)
    slot.put(st.GROUP_STARTED, True)
    slot.put(st.START_TIME, st.rfc3339(draft.now))
    slot.put(st.NEXT_RETRY_TIME, None)
    slot.put(st.PODS_REFUSED, None)
    names_ = ", ".join(slot.group.pod_names)
    draft.event(
        "Normal",
        "Created",
        f"created {slot.label} pod group {attempt}: {names_}"
        + (" (resuming from the checkpoint volume)" if attempt > 0 else ""),
    )


def classify_group(
    slot: Slot,
    current: Mapping[str, Obj],
    nodes: Mapping[str, Obj | None],
    last_seen: Mapping[str, Obj],
) -> dict[str, Classification]:
    outcomes: dict[str, Classification] = {}
    for pod_name in slot.group.pod_names:
        pod = current.get(pod_name)
        if pod is not None:
            node_name = (pod.get("spec") or {}).get("nodeName")
            outcomes[pod_name] = classify(
                pod,
                node=nodes.get(node_name) if node_name else None,
                node_known=bool(node_name) and node_name in nodes,
            )
        else:
            seen = last_seen.get(pod_name)
            if seen is not None and attempt_of(seen) != str(slot.attempt):
                seen = None
            outcomes[pod_name] = classify_missing(seen)
    return outcomes


def held_pods(slot: Slot, current: Mapping[str, Obj], last_seen: Mapping[str, Obj]) -> list[Obj]:
    """The group's pods, with the last version seen of those that vanished (they held
    their GPUs until then)."""
    gone = [
        last_seen[n]
        for n in slot.group.pod_names
        if n not in current and n in last_seen and attempt_of(last_seen[n]) == str(slot.attempt)
    ]
    return [*current.values(), *gone]


def run_group(
    draft: Draft,
    slot: Slot,
    current: Mapping[str, Obj],
    outcomes: Mapping[str, Classification],
    progress: ProgressView,
    held: list[Obj] | None = None,
) -> GroupResult:
    """What a started group's pods say, and the counting that follows. `held`: the
    group's pods for its GPU time (default: `current`)."""
    group = list(current.values())
    held = group if held is None else held
    kinds = {c.outcome for c in outcomes.values()}
    chief = outcomes[slot.group.pod_names[0]]
    gpus = slot.gpus_per_pod
    if chief.outcome == Outcome.COMPLETED and not kinds & {Outcome.FAILED, Outcome.INVALID_SPEC}:
        draft.ledger.close(held, gpus)
        return GroupResult("completed", chief=chief)
    if Outcome.INVALID_SPEC in kinds:
        bad = next(
            f"{n}: {c.message}" for n, c in outcomes.items() if c.outcome == Outcome.INVALID_SPEC
        )
        draft.ledger.close(held, gpus)
        return GroupResult("invalid", message=f"trainer rejected the spec: {bad}")
    if budgets.preemption_wins(outcomes):
        return budgets.count_preemption(draft, slot, outcomes, group, held)
    if Outcome.FAILED in kinds and (waiting := wait_for_peers(draft, outcomes, current)):
        return waiting  # a peer's loss may yet explain the failure
    if Outcome.FAILED in kinds and budgets.trial_out_of_memory(draft, outcomes, progress):
        return budgets.record_trial_oom(draft, slot, outcomes, progress, group, held)
    if Outcome.FAILED in kinds:
        return budgets.count_failure(draft, slot, outcomes, group, held)
    if Outcome.TERMINATING in kinds:
        return _terminating(outcomes, current)
    draft.ledger.holding(group, gpus)
    if all(c.outcome in (Outcome.RUNNING, Outcome.COMPLETED) for c in outcomes.values()):
        report_restore(draft, slot, progress)
        draft.ledger.progressed(slot.group.name, progress)
        return GroupResult("running")
    return _pending(draft, outcomes, group)


def _terminating(outcomes: Mapping[str, Classification], current: Mapping[str, Obj]) -> GroupResult:
    """A pod of the group is being deleted: wait for it (its trainer writes its
    checkpoint), naming a node that is not ready if it is stuck there."""
    since = deletion_due([current[n] for n, c in outcomes.items()
                          if c.outcome == Outcome.TERMINATING and n in current])  # fmt: skip
    lost = [c for c in outcomes.values() if c.reason == TERMINATING_ON_UNREACHABLE_NODE]
    if lost:
        return GroupResult("terminating", TERMINATING_ON_UNREACHABLE_NODE, lost[0].message,
                           lost[0].message, since=since)  # fmt: skip
    return GroupResult(
        "terminating",
        "Terminating",
        "a pod is being deleted; waiting for its checkpoint",
        "a trainer pod is being deleted; waiting for its checkpoint",
        since=since,
    )


def _pending(draft: Draft, outcomes: Mapping[str, Classification], group: list[Obj]) -> GroupResult:
    """Pods of the group have not started: why (a stuck reason with the component's
    message, Kueue's admission, else PodsPending)."""
    pending = [(n, c) for n, c in outcomes.items() if c.outcome == Outcome.PENDING]
    text = ", ".join(
        f"{n}: {c.reason}" + (f" ({c.message})" if c.message and c.reason in STUCK else "")
        for n, c in pending
    )
    stuck = next((c.reason for _, c in pending if c.reason in STUCK), None)
    if stuck is None and any(c.reason == queue.QUEUED for _, c in pending):
        gated = next(p for p in group if queue.gated(p))
        workload = draft.seen.workloads.get(queue.workload_name(gated) or "")
        message = queue.queued_message(gated, workload)
        return GroupResult("pending", queue.QUEUED, message)
    return GroupResult("pending", stuck or PODS_PENDING, text)


def report_restore(draft: Draft, slot: Slot, progress: ProgressView) -> None:
    """A recreated group's trainer restored from the volume: it reports the step it
    resumed at (> 0 mid-epoch) or, at an epoch boundary, a higher `restores` count."""
    attempt = slot.attempt
    if attempt <= 0 or progress.empty or slot.get(st.RESTORED_ATTEMPT) == attempt:
        return
    resumed = progress.count("resumedFromStep") or 0
    count = progress.count("restores") or 0
    if resumed <= 0 and count <= st.int_of(slot.get(st.RESTORE_BASELINE)):
        return
    draft.count(st.RESTORES)
    slot.count(st.RESTORES)
    slot.put(st.RESTORED_ATTEMPT, attempt)
    epoch = progress.count("resumedFromEpoch")
    where = f"at step {resumed}" if resumed > 0 else "at an epoch boundary"
    if epoch is not None:
        where += f" of epoch {epoch}"
    draft.event(
        "Normal",
        "Restored",
        f"{slot.label} pod group {attempt} resumed trial {progress.text('trialId')} {where} "
        "from the checkpoint",
    )


def queued_condition(draft: Draft, message: str | None) -> None:
    """Condition Queued: True with Kueue's message while a group waits for admission.
    Admission ungates the pods (a pod event wakes the pass); the Workload's message is
    not watched, so a queued job's pass re-reads it every UNWATCHED_RECHECK_SECONDS."""
    if message is not None:
        draft.cond(st.COND_QUEUED, True, queue.QUEUED, message)
        draft.decision.wake_within(UNWATCHED_RECHECK_SECONDS)
    elif st.condition_is(draft.conditions, st.COND_QUEUED):
        draft.cond(st.COND_QUEUED, False, "Admitted", "")
