"""What a reconcile pass decides (`Decision`), the status patch it accumulates
(`Builder`) and the steps every pod group shares: progress and final summary into
status, finishing the job, deleting pods, TTL, waiting for the script ConfigMap."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any, NamedTuple

import tuneop_contract as contract

from . import builders, names
from . import status as st
from .classify import (
    Classification,
    classify,
)
from .goodput import Ledger
from .progress import ProgressView, top_trials_status
from .progress import from_configmap as progress_from_configmap
from .progress import read as read_progress
from .spec import JobSpec, SpecError, check_script_configmap

Obj = dict[str, Any]

INVALID_SPEC_PREFIX = "invalid spec: "
"""Start of the message of an InvalidSpec found by the operator itself (the trainer's
starts otherwise): such a failure reopens as soon as the operator's checks pass."""
SCRIPT_MISSING = "ScriptConfigMapMissing"
"""Reason (condition Running, Warning Event) while spec.script.configMap does not exist."""


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


class PodRef(NamedTuple):
    """A pod to delete: that very object (uid), not a successor under its name."""

    name: str
    uid: str | None


@dataclasses.dataclass
class Decision:
    status: Obj = dataclasses.field(default_factory=dict)
    """Merge patch for .status (only what changed)."""
    events: list[Event] = dataclasses.field(default_factory=list)
    ensure_children: bool = False
    create_pods: list[int] = dataclasses.field(default_factory=list)
    """Worker indexes of the sequential group to create (pod group `create_attempt`)."""
    create_attempt: int = 0
    create_groups: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    """Parallel jobs: (group name, its pod group index) of each group to create whole."""
    reset_progress: bool = True
    """With ensure_children: empty the progress ConfigMap for the new pod group. Not for
    a parallel job's group, whose siblings keep reporting there under their own keys."""
    delete_pods: list[PodRef] = dataclasses.field(default_factory=list)
    release_pods: list[PodRef] = dataclasses.field(default_factory=list)
    """Pods whose Kueue pod group is over (annotated retriable-in-group=false first)."""
    delete_job: bool = False
    requeue_after: float | None = None
    finished: bool = False
    """The job is done and stays so until its spec changes (or TTL, or a pod event):
    no need to reconcile it every few seconds."""
    ignored: tuple[str, ...] = ()
    """Fields of status.progress dropped as invalid (the executor logs them)."""
    recoveries: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    """(disruption reason, seconds from the loss to the next training step) measured in
    this pass, for the operator's recovery-time histogram."""

    def merged_status(self, job: Obj) -> Obj:
        """The job's status after this decision's patch (for metrics and logs)."""
        merged = dict(job.get("status") or {})
        for key, value in self.status.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return merged


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


def attempt_of(pod: Obj) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(names.LABEL_ATTEMPT)
    return str(value) if value is not None else None


def foreign(pod: Obj, job: Obj) -> bool:
    """A pod with our labels owned by another TuningJob: an older job of the same name,
    deleted, whose pods are still terminating. Waited for, never adopted or deleted."""
    uids = builders.owner_uids(pod)
    return bool(uids) and str(job["metadata"].get("uid")) not in uids


def alive(pod: Obj) -> bool:
    """Not yet being deleted (a delete call would still do something)."""
    return not (pod.get("metadata") or {}).get("deletionTimestamp")


class Builder:
    """Accumulates the status patch; reads see earlier writes."""

    def __init__(self, job: Obj, now: dt.datetime) -> None:
        self.job = job
        self.now = now
        self.old: Obj = dict(job.get("status") or {})
        self.decision = Decision()
        self.generation = int_of(job["metadata"].get("generation")) or 1
        self.conditions: list[Obj] = list(self.old.get("conditions") or [])
        self.ledger = Ledger(self)
        self.live_pods: list[tuple[Obj, int]] = []
        self.workloads: Mapping[str, Obj | None] = {}
        """Kueue Workloads of queued pod groups, by name (their admission message)."""
        """Pods of started groups that hold GPUs after this pass (goodput's live share)."""

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.decision.status:
            return self.decision.status[key]
        return self.old.get(key, default)

    def put(self, key: str, value: Any) -> None:
        if self.old.get(key) != value or key in self.decision.status:
            self.decision.status[key] = value

    def cond(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        self.conditions = st.set_condition(
            self.conditions, type_, status, reason, message, self.generation, self.now
        )
        if self.conditions != (self.old.get("conditions") or []):
            self.decision.status["conditions"] = self.conditions

    def event(self, type_: str, reason: str, message: str) -> None:
        self.decision.events.append(Event(type_, reason, message))

    def count(self, key: str) -> int:
        value = int_of(self.get(key)) + 1
        self.put(key, value)
        return value


RESULT_FROM_SUMMARY = "TerminationMessage"
"""status.resultSource once the final trials/best came from the trainer's final summary;
from then on status.progress (possibly stale: a lost patch) no longer overrides them."""
RESULT_FROM_PROGRESS = "Progress"


def copy_progress(b: Builder, configmap: Obj | None, tuner_id: str | None = None) -> ProgressView:
    """The trainer's record: the valid fields of what it reported to the progress
    ConfigMap, copied into status.progress (whole: fields it no longer reports are
    removed), or status.progress as it is while the map holds no record. Only this
    record comes from the trainer; phase, counters and budgets never do. `tuner_id`:
    whose record (a parallel job's oracle; None: the sequential trainer)."""
    name = names.progress_configmap_name(b.job["metadata"]["name"])
    reported = progress_from_configmap(configmap, name, tuner_id)
    if reported is None:
        return read_progress(b.old.get("progress"))
    old = b.old.get("progress")
    old = old if isinstance(old, dict) else {}
    if {k: v for k, v in old.items() if v is not None} != reported.values:
        b.decision.status["progress"] = {**dict.fromkeys(old), **reported.values}
    return reported


def apply_progress(b: Builder, progress: ProgressView) -> None:
    if b.old.get("resultSource") == RESULT_FROM_SUMMARY:
        return
    if progress.empty:
        if b.get("trials") is None:
            b.put("trials", "0/?")
        return
    done = progress.count("trialsCompleted") or 0
    total = progress.count("trialsTotal")
    b.put("trialsCompleted", done)
    if total is not None:
        b.put("trialsTotal", total)
    b.put("trials", f"{done}/{total if total is not None else '?'}")
    if progress.text("trialId"):
        b.put("currentTrial", progress.text("trialId"))
    best_id = progress.text("bestTrialId")
    if best_id is not None:
        best: Obj = {"id": best_id}
        if progress.values.get("bestScore") is not None:
            best["score"] = progress.values["bestScore"]
        if progress.values.get("bestHyperparameters") is not None:
            best["hyperparameters"] = progress.values["bestHyperparameters"]
        b.put("bestTrial", best)
    top = progress.values.get("topTrials")
    if top is not None:
        b.put("topTrials", top_trials_status(top))
    for key in ("lastProgressTime", "lastCheckpointTime"):
        if progress.text(key):
            b.put(key, progress.text(key))


def apply_final(b: Builder, chief: Classification) -> None:
    """The completed chief's termination message holds the search's final summary: it
    wins over status.progress, whose last patches may never have arrived."""
    summary = contract.parse_final_summary(chief.message)
    if summary is None:  # an older trainer: the progress is all there is
        b.put("resultSource", RESULT_FROM_PROGRESS)
        return
    total = summary.trials_total
    b.put("trialsCompleted", summary.trials_completed)
    if total is not None:
        b.put("trialsTotal", total)
    b.put("trials", f"{summary.trials_completed}/{total if total is not None else '?'}")
    if summary.best_trial_id is not None:
        old = b.get("bestTrial") or {}
        best: Obj = {"id": summary.best_trial_id}
        if summary.best_score is not None:
            best["score"] = summary.best_score
        hps = summary.best_hyperparameters
        if hps is None and isinstance(old, dict) and old.get("id") == summary.best_trial_id:
            hps = old.get("hyperparameters")  # omitted from a summary too long to keep
        if hps is not None:
            best["hyperparameters"] = hps
        b.put("bestTrial", best)
    top = read_progress({"topTrials": summary.top_trials}).values.get("topTrials")
    if top is not None:  # else: omitted from a summary too long; the progress's stay
        b.put("topTrials", top_trials_status(top))
    b.put("resultSource", RESULT_FROM_SUMMARY)


def best_text(b: Builder) -> str:
    best = b.get("bestTrial") or {}
    if not best:
        return "no best trial reported"
    score = best.get("score")
    return f"best trial {best.get('id')} score {score if score is not None else '?'}"


def finish(b: Builder, *, succeeded: bool, reason: str, message: str) -> None:
    b.put("phase", st.PHASE_SUCCEEDED if succeeded else st.PHASE_FAILED)
    b.put("completionTime", st.rfc3339(b.now))
    b.put("message", message)
    b.put("nextRetryTime", None)
    b.cond(st.COND_RUNNING, False, reason, message)
    b.cond(st.COND_STALLED, False, reason, "")
    if succeeded:
        b.cond(st.COND_COMPLETE, True, reason, message)
        b.event("Normal", "Completed", message)
    else:
        b.cond(st.COND_FAILED, True, reason, message)
        b.event("Warning", reason, message)


def delete_alive(b: Builder, pods: list[Obj], *, keep_ended: bool = False) -> None:
    for pod in pods:
        if not alive(pod):
            continue
        if keep_ended and classify(pod).ended:
            continue
        name = pod["metadata"]["name"]
        if name not in [ref.name for ref in b.decision.delete_pods]:
            b.decision.delete_pods.append(PodRef(name, pod["metadata"].get("uid")))


def ttl(b: Builder, spec: JobSpec) -> None:
    ttl = spec.ttl_seconds_after_finished
    if ttl is None:
        return
    done = st.parse_time(b.get("completionTime")) or b.now
    left = (done + dt.timedelta(seconds=int(ttl)) - b.now).total_seconds()
    if left <= 0:
        b.decision.delete_job = True
    else:
        b.decision.requeue_after = left


def script_missing(spec: JobSpec, configmaps: Mapping[str, Obj | None]) -> bool:
    return bool(spec.script_configmap) and configmaps.get(spec.script_configmap) is None


def script_error(spec: JobSpec, configmaps: Mapping[str, Obj | None]) -> SpecError | None:
    """What is wrong with an existing spec.script.configMap (None: fine or missing)."""
    configmap = configmaps.get(spec.script_configmap) if spec.script_configmap else None
    return check_script_configmap(spec, configmap) if configmap is not None else None


def wait_for_script(b: Builder, spec: JobSpec) -> None:
    """The user's ConfigMap does not exist (yet: `kubectl apply -f dir/` or a GitOps tool
    may create it after the job). Wait for it rather than fail, but visibly; never
    create pods that would sit in ContainerCreating until it appears."""
    name, ns = spec.script_configmap, b.job["metadata"]["namespace"]
    key = spec.script.key if spec.script is not None and spec.script.key else None
    message = (
        f"waiting for ConfigMap {name!r} (spec.script.configMap.name) in namespace {ns!r}; "
        f"create it, e.g. kubectl create configmap {name} -n {ns} "
        f"--from-file={key or contract.DEFAULT_SCRIPT_KEY}"
    )
    running = st.get_condition(b.conditions, st.COND_RUNNING) or {}
    if running.get("reason") != SCRIPT_MISSING:
        b.event("Warning", SCRIPT_MISSING, message)
    b.cond(st.COND_RUNNING, False, SCRIPT_MISSING, message)
    b.put("message", message)


def reopen_or_stay(
    b: Builder,
    spec: JobSpec,
    slots: list[Any],
    current: list[Obj],
    errors: list[SpecError],
    script_err: SpecError | None,
) -> bool:
    """A finished job stays finished (True: the decision is complete) unless it failed
    with an InvalidSpec that is fixed now: then it reopens (phase Pending), every
    started pod group is replaced, and the caller goes on (False). `slots`: the job's
    group slots (group_step.Slot)."""
    phase = b.get("phase")
    failed = st.get_condition(b.conditions, st.COND_FAILED) or {}
    # A spec edit may fix what the trainer rejected; what the operator rejected is
    # re-checked every pass (a fixed ConfigMap changes no generation).
    operator_rejected = failed.get("reason") == "InvalidSpec" and str(
        failed.get("message", "")
    ).startswith(INVALID_SPEC_PREFIX)
    reopen = (
        phase == st.PHASE_FAILED
        and failed.get("reason") == "InvalidSpec"
        and (failed.get("observedGeneration") != b.generation or operator_rejected)
        and not errors
        and script_err is None
    )
    if not reopen:
        b.decision.finished = not operator_rejected
        delete_alive(b, current, keep_ended=phase != st.PHASE_FAILED)
        ttl(b, spec)
        return True
    b.put("phase", st.PHASE_PENDING)
    b.put("completionTime", None)
    b.cond(st.COND_FAILED, False, "SpecChanged", "the spec changed; trying again")
    b.event("Normal", "SpecChanged", "the spec is valid now; starting the trainer again")
    for slot in slots:
        slot.put("completed", None)
        if slot.started:
            slot.recreate()
    delete_alive(b, current)
    return False


def suspend(b: Builder, slots: list[Any], pods: list[Obj]) -> None:
    """spec.suspend: every pod stops gracefully (they checkpoint), the volume stays;
    each started group gets a new pod group index, so resuming creates fresh pods."""
    if b.get("phase") != st.PHASE_SUSPENDED:
        b.put("phase", st.PHASE_SUSPENDED)
        b.cond(st.COND_SUSPENDED, True, "Suspended", "spec.suspend is true")
        b.cond(st.COND_RUNNING, False, "Suspended", "")
        b.cond(st.COND_STALLED, False, "Suspended", "")
        b.event(
            "Normal",
            "Suspended",
            "stopping the trainer pods gracefully (they checkpoint); the volume is kept",
        )
        for slot in slots:
            if slot.started:
                slot.recreate()
    delete_alive(b, pods)
    b.put("message", "suspended" if not pods else f"suspending: {len(pods)} pod(s) stopping")


def resume_if_suspended(b: Builder) -> None:
    if b.get("phase") == st.PHASE_SUSPENDED:
        b.put("phase", st.PHASE_PENDING)
        b.cond(st.COND_SUSPENDED, False, "Resumed", "spec.suspend is false")
        b.event("Normal", "Resumed", "resuming the search from the checkpoint volume")
