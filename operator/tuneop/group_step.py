"""The rules for one pod group, shared by sequential and parallel jobs: start it (after
any backoff), classify its pods, and count and recreate it when it was disrupted, failed
or ran out of memory in a trial. A sequential job has one group whose bookkeeping is
the top-level status (`status.attempt`, ...); each group of a parallel job keeps its own
in its `status.groups` entry (`Slot`). Budgets and counters are the job's in both."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from . import builders, queue
from . import status as st
from .classify import (
    STUCK_WAITING_REASONS,
    TERMINATING_ON_UNREACHABLE_NODE,
    TRAINER_PREEMPTED,
    UNSCHEDULABLE,
    Classification,
    Outcome,
    classify,
    classify_missing,
)
from .decision import Builder, PodRef, attempt_of, delete_alive, finish, int_of
from .groups import PodGroup
from .progress import ProgressView
from .spec import JobSpec

Obj = dict[str, Any]

TRIAL_OOM = "TrialOutOfMemory"
"""Reason (Event, condition Running) of a trial recorded FAILED for running out of memory."""

TOP_LEVEL = {
    "attempt": "attempt",
    "started": "attemptStarted",
    "startTime": "attemptStartTime",
    "nextRetryTime": "nextRetryTime",
    "restoredAttempt": "restoredAttempt",
    "restoreBaseline": "restoreBaseline",
}
"""Where the sequential group's bookkeeping lives in status (a parallel job's groups
use the same keys inside their `status.groups` entry)."""


PODS_PENDING = "PodsPending"
STUCK = (*STUCK_WAITING_REASONS, UNSCHEDULABLE)
"""Pending reasons named in the Running condition (and in Stalled once they last)."""


class Slot:
    """One pod group's bookkeeping: the top-level status fields of the sequential group,
    or (`entry`) the status.groups entry of a parallel job's group, which also keeps
    per-group counters and what its trainer last reported."""

    def __init__(self, b: Builder, group: PodGroup, entry: Obj | None = None) -> None:
        self.b = b
        self.group = group
        self.entry = entry

    def get(self, key: str, default: Any = None) -> Any:
        if self.entry is None:
            return self.b.get(TOP_LEVEL[key], default) if key in TOP_LEVEL else default
        return self.entry.get(key, default)

    def put(self, key: str, value: Any) -> None:
        if self.entry is None:
            if key in TOP_LEVEL:
                self.b.put(TOP_LEVEL[key], value)
        elif value is None:
            self.entry.pop(key, None)
        else:
            self.entry[key] = value

    def count(self, key: str) -> None:
        """A per-group counter (parallel jobs only; the job's own counts are `b.count`)."""
        if self.entry is not None:
            self.entry[key] = int_of(self.entry.get(key)) + 1

    @property
    def attempt(self) -> int:
        return int_of(self.get("attempt"))

    @property
    def started(self) -> bool:
        return bool(self.get("started"))

    @property
    def label(self) -> str:
        """How Events and messages name the group."""
        if self.entry is None:
            return "trainer"
        return "oracle" if self.group.oracle else f"trial group {self.group.name}"

    def recreate(self) -> None:
        """The next pass creates a new pod group (index + 1)."""
        self.put("attempt", self.attempt + 1)
        self.put("started", False)

    def restart(self) -> None:
        """Recreate after the group ended on its own (disruption, failure, trial OOM,
        stall), counted in the job's and the group's `restarts`."""
        self.recreate()
        self.b.count("restarts")
        self.count("restarts")


@dataclasses.dataclass
class GroupResult:
    kind: str
    """completed | invalid | recreate | ended | terminating | running | pending
    (ended: a budget is spent and the job was finished Failed)."""
    reason: str = ""
    message: str = ""
    """For the Running condition (recreate, pending) or the job's failure (invalid)."""
    summary: str = ""
    """status.message of a sequential job."""
    chief: Classification | None = None


def gpus_per_pod(spec: JobSpec, slot: Slot) -> int:
    return spec.distribution.gpus_per_worker if slot.group.gpus else 0


def last_checkpoint(b: Builder, slot: Slot) -> Any:
    """The group's last checkpoint time, not before the group started (a group that
    never checkpointed loses everything since its start)."""
    reported = b.get("lastCheckpointTime") if slot.entry is None else slot.get("lastCheckpointTime")
    times = [t for t in (st.parse_time(reported), st.parse_time(slot.get("startTime"))) if t]
    return st.rfc3339(max(times)) if times else None


def current_pods(slot: Slot, pods: list[Obj]) -> dict[str, Obj]:
    """The group's pods of its current attempt, by name."""
    attempt = str(slot.attempt)
    return {
        p["metadata"]["name"]: p
        for p in pods
        if attempt_of(p) == attempt and p["metadata"]["name"] in slot.group.pod_names
    }


def backoff_wait(b: Builder, slot: Slot) -> str | None:
    """While the group's failure backoff runs: the message to show (and the pass is
    requeued for its end)."""
    retry = st.parse_time(slot.get("nextRetryTime"))
    if retry is None or b.now >= retry:
        return None
    wait = (retry - b.now).total_seconds()
    b.decision.requeue_after = min(b.decision.requeue_after or wait, wait)
    return f"retrying at {st.rfc3339(retry)} (backoff after a failure)"


def start_group(b: Builder, slot: Slot) -> None:
    """Create the group's pods (pod group index `slot.attempt`)."""
    attempt = slot.attempt
    b.decision.ensure_children = True
    if slot.entry is None:
        b.decision.create_pods = list(range(len(slot.group.pod_names)))
        b.decision.create_attempt = attempt
    else:
        b.decision.create_groups.append((slot.group.name, attempt))
    if slot.entry is None and st.condition_is(b.conditions, st.COND_STALLED):
        b.cond(st.COND_STALLED, False, "NewPodGroup", "")
    slot.put("attempt", attempt)
    slot.put("started", True)
    slot.put("startTime", st.rfc3339(b.now))
    slot.put("nextRetryTime", None)
    names_ = ", ".join(slot.group.pod_names)
    b.event(
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
    b: Builder,
    spec: JobSpec,
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
    fp = spec.failure_policy
    attempt = slot.attempt
    gpus = gpus_per_pod(spec, slot)

    if chief.outcome == Outcome.COMPLETED and not kinds & {Outcome.FAILED, Outcome.INVALID_SPEC}:
        b.ledger.close(held, gpus)
        return GroupResult("completed", chief=chief)

    if Outcome.INVALID_SPEC in kinds:
        bad = next(
            f"{n}: {c.message}" for n, c in outcomes.items() if c.outcome == Outcome.INVALID_SPEC
        )
        b.ledger.close(held, gpus)
        return GroupResult("invalid", message=f"trainer rejected the spec: {bad}")

    if preemption_wins(outcomes):
        # disruption wins: other workers of a MultiWorkerMirrored group often crash
        # (exit 1) once a peer is gone, which is not their failure
        what = ", ".join(
            f"{n}: {c.reason}"
            + (f" ({c.message})" if c.reason == queue.EVICTED_BY_KUEUE and c.message else "")
            for n, c in outcomes.items()
            if c.outcome == Outcome.PREEMPTED
        )
        preemptions = b.count("preemptions")
        slot.count("preemptions")
        if any(c.reason == queue.EVICTED_BY_KUEUE for c in outcomes.values()):
            b.count("queueEvictions")  # Kueue took the quota back (a preemption too)
            slot.count("queueEvictions")
        delete_alive(b, group)
        b.ledger.close(held, gpus)
        reason = next(c.reason for c in outcomes.values() if c.outcome == Outcome.PREEMPTED)
        b.ledger.disrupted(
            slot.group.name, last_checkpoint(b, slot), reason, gpus * len(slot.group.pod_names)
        )
        if preemptions > fp.max_preemptions:
            finish(
                b,
                succeeded=False,
                reason="PreemptionBudgetExceeded",
                message=f"{preemptions} preemptions exceed failurePolicy.maxPreemptions="
                f"{fp.max_preemptions}; last: {what}",
            )
            return GroupResult("ended")
        if slot.entry is None:
            how = "all workers" if len(slot.group.pod_names) > 1 else "the trainer"
        else:
            how = "it alone (the other groups keep running)"
        resumes = "it resumes from the checkpoint"
        if slot.entry is not None and not slot.group.oracle:
            resumes = "it resumes its trial from the checkpoint"
        b.event(
            "Warning",
            "Preempted",
            f"{slot.label} pod group {attempt} disrupted ({what}); recreating {how}, {resumes}",
        )
        slot.restart()
        return GroupResult(
            "recreate",
            "Preempted",
            what,
            f"preempted ({what}); recreating the {slot.label} pod group",
        )

    if Outcome.FAILED in kinds and trial_out_of_memory(b, outcomes, progress):
        return record_trial_oom(b, outcomes, progress, spec, group, slot, held)

    if Outcome.FAILED in kinds:
        what = "; ".join(
            f"{n}: {c.reason}: {c.message}"
            for n, c in outcomes.items()
            if c.outcome == Outcome.FAILED
        )
        failures = b.count("failures")
        slot.count("failures")
        delete_alive(b, group)
        b.ledger.close(held, gpus)
        if failures > fp.max_failures:
            finish(
                b,
                succeeded=False,
                reason="FailureBudgetExceeded",
                message=f"{failures} trainer failures exceed failurePolicy.maxFailures="
                f"{fp.max_failures}; last: {what}",
            )
            return GroupResult("ended")
        delay = fp.backoff(failures)
        b.event(
            "Warning",
            "TrainerFailed",
            f"{slot.label} failed ({failures}/{fp.max_failures} tolerated): {what}; "
            f"retry in {delay}s",
        )
        slot.restart()
        slot.put("nextRetryTime", st.rfc3339(b.now + dt.timedelta(seconds=delay)))
        b.decision.requeue_after = min(b.decision.requeue_after or delay, float(delay))
        return GroupResult(
            "recreate",
            "TrainerFailed",
            what,
            f"{slot.label} failed: {what}; retrying in {delay}s",
        )

    if Outcome.TERMINATING in kinds:
        lost = [c for c in outcomes.values() if c.reason == TERMINATING_ON_UNREACHABLE_NODE]
        if lost:
            return GroupResult(
                "terminating", TERMINATING_ON_UNREACHABLE_NODE, lost[0].message, lost[0].message
            )
        return GroupResult(
            "terminating",
            "Terminating",
            "a pod is being deleted; waiting for its checkpoint",
            "a trainer pod is being deleted; waiting for its checkpoint",
        )

    b.live_pods.extend((p, gpus) for p in group)  # the group goes on holding its GPUs
    if all(c.outcome in (Outcome.RUNNING, Outcome.COMPLETED) for c in outcomes.values()):
        report_restore(b, slot, progress)
        b.ledger.progressed(slot.group.name, progress)
        return GroupResult("running")

    pending = [(n, c) for n, c in outcomes.items() if c.outcome == Outcome.PENDING]
    text = ", ".join(
        f"{n}: {c.reason}" + (f" ({c.message})" if c.message and c.reason in STUCK else "")
        for n, c in pending
    )
    stuck = next((c.reason for _, c in pending if c.reason in STUCK), None)
    if stuck is None and any(c.reason == queue.QUEUED for _, c in pending):
        gated = next(p for p in group if queue.gated(p))
        message = queue.queued_message(gated, b.workloads.get(queue.workload_name(gated) or ""))
        return GroupResult("pending", queue.QUEUED, message)
    return GroupResult("pending", stuck or PODS_PENDING, text)


def trial_out_of_memory(
    b: Builder, outcomes: Mapping[str, Classification], progress: ProgressView
) -> bool:
    """A worker of the group ran out of memory while the trainer was in a trial it
    named, not yet recorded as out of memory: that trial is infeasible on these pods,
    not the trainer's failure. An OOM before the first trial, or naming a trial the
    operator already recorded (the next trainer ran out of memory before it reported a
    new one, or did not honour the record), stays a failure."""
    trial = progress.text("trialId")
    if not trial or trial in builders.oom_trials({"oomTrials": b.get("oomTrials")}):
        return False
    return any(c.outcome == Outcome.FAILED and c.out_of_memory for c in outcomes.values())


def record_trial_oom(
    b: Builder,
    outcomes: Mapping[str, Classification],
    progress: ProgressView,
    spec: JobSpec,
    group: list[Obj],
    slot: Slot,
    held: list[Obj],
) -> GroupResult:
    """Record the running trial in status.oomTrials (the next pods get it in
    TUNEOP_FAILED_TRIALS and mark it FAILED in the oracle), count it in trialOOMs, and
    recreate the group at once: no backoff, the failure budget untouched. More than
    failurePolicy.maxTrialOOMs such trials end the job."""
    trial = str(progress.text("trialId"))
    fp = spec.failure_policy
    who = ", ".join(
        f"{n}: exit {c.exit_code}" if c.reason != "OOMKilled" else f"{n}: OOMKilled"
        for n, c in outcomes.items()
        if c.outcome == Outcome.FAILED and c.out_of_memory
    )
    ooms = b.count("trialOOMs")
    b.put("oomTrials", [*builders.oom_trials({"oomTrials": b.get("oomTrials")}), trial])
    delete_alive(b, group)
    b.ledger.close(held, gpus_per_pod(spec, slot))
    limits = (spec.resources.get("limits") or {}).get("memory")
    memory = f" (limit {limits})" if limits else ""
    advice = (
        f"raise spec.resources.limits.memory{memory} (and requests.memory), or shrink the "
        "search space (the hyperparameter ranges or batch size that make the model this large)"
    )
    if ooms > fp.max_trial_ooms:
        finish(
            b,
            succeeded=False,
            reason="TrialOOMBudgetExceeded",
            message=f"{ooms} trials ran out of memory, more than failurePolicy.maxTrialOOMs="
            f"{fp.max_trial_ooms}; last: trial {trial} ({who}); {advice}",
        )
        return GroupResult("ended")
    b.event(
        "Warning",
        TRIAL_OOM,
        f"trial {trial} ran out of memory ({who}); it is recorded FAILED and the search "
        f"goes on with the next trial ({ooms}/{fp.max_trial_ooms} tolerated); {advice}",
    )
    slot.restart()
    slot.put("nextRetryTime", None)
    return GroupResult(
        "recreate",
        TRIAL_OOM,
        f"trial {trial} ran out of memory ({who})",
        f"trial {trial} ran out of memory; recreating the {slot.label} pod group",
    )


def preemption_wins(outcomes: Mapping[str, Classification]) -> bool:
    """The group counts as preempted: a worker was disrupted from outside (its peers'
    crashes are collateral), or workers stopped with the trainer's exit 75 and none
    failed. Peers' exit 75 never masks a real failure (OOMKilled, an error exit) of one
    worker: that trial would otherwise be retried for ever on the preemption budget."""
    preempted = [c for c in outcomes.values() if c.outcome == Outcome.PREEMPTED]
    if not preempted:
        return False
    external = any(c.reason != TRAINER_PREEMPTED for c in preempted)
    failed = any(c.outcome == Outcome.FAILED for c in outcomes.values())
    return external or not failed


def report_restore(b: Builder, slot: Slot, progress: ProgressView) -> None:
    """A recreated group's trainer restored from the volume: it reports the step it
    resumed at (> 0 mid-epoch) or, at an epoch boundary, a higher `restores` count."""
    attempt = slot.attempt
    if attempt <= 0 or progress.empty or slot.get("restoredAttempt") == attempt:
        return
    resumed = progress.count("resumedFromStep") or 0
    count = progress.count("restores") or 0
    if resumed <= 0 and count <= int_of(slot.get("restoreBaseline")):
        return
    b.count("restores")
    slot.count("restores")
    slot.put("restoredAttempt", attempt)
    epoch = progress.count("resumedFromEpoch")
    where = f"at step {resumed}" if resumed > 0 else "at an epoch boundary"
    if epoch is not None:
        where += f" of epoch {epoch}"
    b.event(
        "Normal",
        "Restored",
        f"{slot.label} pod group {attempt} resumed trial {progress.text('trialId')} {where} "
        "from the checkpoint",
    )


def idle_seconds(b: Builder, last_progress: Any, started_at: Any) -> float | None:
    """Seconds since the later of the last progress and the group's start."""
    known = [t for t in (st.parse_time(last_progress), st.parse_time(started_at)) if t]
    return (b.now - max(known)).total_seconds() if known else None


@dataclasses.dataclass(frozen=True)
class Stuck:
    """A pod group judged for Stalled: how long it has been idle or not started."""

    slot: Slot
    idle: float | None
    timeout: int
    reason: str
    detail: str = ""
    field: str = "stallTimeoutSeconds"


def running_stuck(b: Builder, spec: JobSpec, slot: Slot, last_progress: Any) -> Stuck:
    """A running group: idle since its last progress (or its start)."""
    idle = idle_seconds(b, last_progress, slot.get("startTime"))
    return Stuck(slot, idle, spec.stall_timeout_seconds, "NoProgress")


def waiting_stuck(b: Builder, spec: JobSpec, slot: Slot, result: GroupResult) -> Stuck:
    """A group whose pods have not started (or cannot finish terminating) since it was
    created: judged against pendingTimeoutSeconds, with the reason it waits."""
    idle = idle_seconds(b, None, slot.get("startTime"))
    return Stuck(
        slot, idle, spec.pending_timeout_seconds, result.reason, result.message,
        "pendingTimeoutSeconds",
    )  # fmt: skip


def judge_stall(b: Builder, candidates: list[Stuck]) -> Stuck | None:
    """Condition Stalled from the groups over their timeout (the first one named; True
    with one Warning Event when it starts or its reason changes), False otherwise.
    Returns the group that became stalled in this pass, for the stall policy."""
    over = [c for c in candidates if c.idle is not None and c.idle > c.timeout]
    current = st.get_condition(b.conditions, st.COND_STALLED) or {}
    if not over:
        if current.get("status") == "True" or not current:
            b.cond(st.COND_STALLED, False, "Progressing", "")
        return None
    first = over[0]
    who = "" if first.slot.entry is None else f"{first.slot.label}: "
    what = "no progress" if first.reason == "NoProgress" else first.reason
    message = f"{who}{what} for {int(first.idle or 0)}s ({first.field}={first.timeout})"
    if first.detail:
        message += f": {first.detail}"
    if current.get("status") == "True" and current.get("reason") == first.reason:
        return None
    b.cond(st.COND_STALLED, True, first.reason, message[:32768])
    b.event("Warning", "Stalled", message)
    return first


STALL_RESTART = "StallRestart"


def _stop(b: Builder, spec: JobSpec, slot: Slot, pods: Mapping[str, Obj]) -> None:
    """The operator stops a running group: its pods go, their GPU time is closed and no
    longer counted as live."""
    delete_alive(b, list(pods.values()))
    b.ledger.close(pods.values(), gpus_per_pod(spec, slot))
    b.live_pods = [(p, g) for p, g in b.live_pods if p not in pods.values()]


def apply_stall_policy(
    b: Builder, spec: JobSpec, stuck: Stuck, pods: Mapping[str, Obj]
) -> GroupResult | None:
    """spec.stallPolicy for a group that just became Stalled: Restart recreates it
    (status.restarts and stallRestarts, never a failure or a preemption), Fail ends the
    job with reason Stalled; Ignore leaves it to the condition and the alert."""
    slot = stuck.slot
    condition = st.get_condition(b.conditions, st.COND_STALLED) or {}
    message = str(condition.get("message") or stuck.reason)
    if spec.stall_policy == "Fail":
        _stop(b, spec, slot, pods)
        finish(b, succeeded=False, reason="Stalled", message=f"stalled: {message}")
        return GroupResult("ended")
    if spec.stall_policy != "Restart":
        return None
    _stop(b, spec, slot, pods)
    b.event(
        "Warning",
        STALL_RESTART,
        f"{slot.label} pod group {slot.attempt} stalled ({stuck.reason}); recreating it "
        "(stallPolicy Restart)",
    )
    slot.restart()
    b.count("stallRestarts")
    return GroupResult(
        "recreate",
        STALL_RESTART,
        message,
        f"stalled ({stuck.reason}); recreating the {slot.label} pod group",
    )


def release_held(b: Builder, pods: list[Obj], keep: set[str], stopping: bool) -> None:
    """Declare over the Kueue pod groups the operator is done with: pods Kueue still
    holds that are not of a group's current attempt (`keep`; created but not yet
    recorded as started counts as current), are being deleted, or belong to a job that
    stops (finished, suspended). Their Workload finishes and its quota is free."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name"))
        if not queue.held(pod):
            continue
        if stopping or name not in keep or meta.get("deletionTimestamp"):
            b.decision.release_pods.append(PodRef(name, meta.get("uid")))


def queued_condition(b: Builder, message: str | None) -> None:
    """Condition Queued: True with Kueue's message while a group waits for admission."""
    if message is not None:
        b.cond(st.COND_QUEUED, True, queue.QUEUED, message)
    elif st.condition_is(b.conditions, st.COND_QUEUED):
        b.cond(st.COND_QUEUED, False, "Admitted", "")
