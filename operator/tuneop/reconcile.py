"""The level-based decision, as a pure function: given the TuningJob (spec + status),
its pods and what is known of their nodes, return what to change. No API calls here:
tuneop.kube applies a Decision, tests/unit/test_operator_reconcile.py drives this
function through whole scenarios (preemption, failures and backoff, budgets, suspend,
restore reporting, stall, TTL).

Idempotence: counters move only together with `status.attempt` (the pod group index)
in one status patch, which the executor writes before it deletes anything; pods of an
older group are deleted without being counted again. Pods are created (by name, 409 is
fine) before `attemptStarted` is written, so a restart between the two creates nothing
twice and counts nothing."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any, NamedTuple

import tuneop_contract as contract

from . import builders, names
from . import status as st
from .classify import (
    TRAINER_PREEMPTED,
    Classification,
    Outcome,
    classify,
    classify_missing,
    needs_node,
)
from .progress import ProgressView
from .progress import from_configmap as progress_from_configmap
from .progress import read as read_progress
from .spec import JobSpec, SpecError, check_script_configmap, validate

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
    create_attempt: int = 0
    delete_pods: list[PodRef] = dataclasses.field(default_factory=list)
    delete_job: bool = False
    requeue_after: float | None = None
    finished: bool = False
    """The job is done and stays so until its spec changes (or TTL, or a pod event):
    no need to reconcile it every few seconds."""
    ignored: tuple[str, ...] = ()
    """Fields of status.progress dropped as invalid (the executor logs them)."""

    def merged_status(self, job: Obj) -> Obj:
        """The job's status after this decision's patch (for metrics and logs)."""
        merged = dict(job.get("status") or {})
        for key, value in self.status.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return merged


def _int(value: Any) -> int:
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


def _attempt_of(pod: Obj) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(names.LABEL_ATTEMPT)
    return str(value) if value is not None else None


def _foreign(pod: Obj, job: Obj) -> bool:
    """A pod with our labels owned by another TuningJob: an older job of the same name,
    deleted, whose pods are still terminating. Waited for, never adopted or deleted."""
    uids = builders.owner_uids(pod)
    return bool(uids) and str(job["metadata"].get("uid")) not in uids


def _alive(pod: Obj) -> bool:
    """Not yet being deleted (a delete call would still do something)."""
    return not (pod.get("metadata") or {}).get("deletionTimestamp")


class _Builder:
    """Accumulates the status patch; reads see earlier writes."""

    def __init__(self, job: Obj, now: dt.datetime) -> None:
        self.job = job
        self.now = now
        self.old: Obj = dict(job.get("status") or {})
        self.decision = Decision()
        self.generation = _int(job["metadata"].get("generation")) or 1
        self.conditions: list[Obj] = list(self.old.get("conditions") or [])

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
        value = _int(self.get(key)) + 1
        self.put(key, value)
        return value


RESULT_FROM_SUMMARY = "TerminationMessage"
"""status.resultSource once the final trials/best came from the trainer's final summary;
from then on status.progress (possibly stale: a lost patch) no longer overrides them."""
RESULT_FROM_PROGRESS = "Progress"


def _copy_progress(b: _Builder, configmap: Obj | None) -> ProgressView:
    """The trainer's record: the valid fields of what it reported to the progress
    ConfigMap, copied into status.progress (whole: fields it no longer reports are
    removed), or status.progress as it is while the map holds no record. Only this
    record comes from the trainer; phase, counters and budgets never do."""
    name = names.progress_configmap_name(b.job["metadata"]["name"])
    reported = progress_from_configmap(configmap, name)
    if reported is None:
        return read_progress(b.old.get("progress"))
    old = b.old.get("progress")
    old = old if isinstance(old, dict) else {}
    if {k: v for k, v in old.items() if v is not None} != reported.values:
        b.decision.status["progress"] = {**dict.fromkeys(old), **reported.values}
    return reported


def _apply_progress(b: _Builder, progress: ProgressView) -> None:
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
    for key in ("lastProgressTime", "lastCheckpointTime"):
        if progress.text(key):
            b.put(key, progress.text(key))


def _apply_final(b: _Builder, chief: Classification) -> None:
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
    b.put("resultSource", RESULT_FROM_SUMMARY)


def _best_text(b: _Builder) -> str:
    best = b.get("bestTrial") or {}
    if not best:
        return "no best trial reported"
    score = best.get("score")
    return f"best trial {best.get('id')} score {score if score is not None else '?'}"


def _finish(b: _Builder, *, succeeded: bool, reason: str, message: str) -> None:
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


def _delete_alive(b: _Builder, pods: list[Obj], *, keep_ended: bool = False) -> None:
    for pod in pods:
        if not _alive(pod):
            continue
        if keep_ended and classify(pod).ended:
            continue
        name = pod["metadata"]["name"]
        if name not in [ref.name for ref in b.decision.delete_pods]:
            b.decision.delete_pods.append(PodRef(name, pod["metadata"].get("uid")))


def _ttl(b: _Builder, spec: JobSpec) -> None:
    ttl = spec.ttl_seconds_after_finished
    if ttl is None:
        return
    done = st.parse_time(b.get("completionTime")) or b.now
    left = (done + dt.timedelta(seconds=int(ttl)) - b.now).total_seconds()
    if left <= 0:
        b.decision.delete_job = True
    else:
        b.decision.requeue_after = left


def _script_missing(spec: JobSpec, configmaps: Mapping[str, Obj | None]) -> bool:
    return bool(spec.script_configmap) and configmaps.get(spec.script_configmap) is None


def _script_error(spec: JobSpec, configmaps: Mapping[str, Obj | None]) -> SpecError | None:
    """What is wrong with an existing spec.script.configMap (None: fine or missing)."""
    configmap = configmaps.get(spec.script_configmap) if spec.script_configmap else None
    return check_script_configmap(spec, configmap) if configmap is not None else None


def _wait_for_script(b: _Builder, spec: JobSpec) -> None:
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


def nodes_to_read(job: Obj, pods: list[Obj]) -> list[str]:
    """The nodes `decide` will consult: those of the running pod group's pods that are
    bound and have not ended. Nothing while no group runs or once the job is finished."""
    status = job.get("status") or {}
    if status.get("phase") in st.TERMINAL_PHASES or not status.get("attemptStarted"):
        return []
    attempt = str(_int(status.get("attempt")))
    return sorted(
        {
            str(pod["spec"]["nodeName"])
            for pod in pods
            if _attempt_of(pod) == attempt and not _foreign(pod, job) and needs_node(pod)
        }
    )


def decide(
    job: Obj,
    pods: list[Obj],
    *,
    now: dt.datetime,
    nodes: dict[str, Obj | None] | None = None,
    last_seen: dict[str, Obj] | None = None,
    configmaps: Mapping[str, Obj | None] | None = None,
    progress_configmap: Obj | None = None,
) -> Decision:
    """What to do next for `job`. `pods`: the job's pods (by label). `nodes`: Node objects
    by name, None for a node known not to exist (names absent = unknown). `last_seen`:
    the last version of each pod the watch delivered (says why a vanished pod went).
    `configmaps`: the ConfigMap named by spec.script.configMap, by name (None or absent
    = not found), read before each decision so no pod is created without it.
    `progress_configmap`: the job's progress ConfigMap, where the trainer reports; its
    valid fields are copied into status.progress (None or empty: status.progress as it is)."""
    nodes = nodes or {}
    last_seen = last_seen or {}
    configmaps = configmaps or {}
    b = _Builder(job, now)
    name = job["metadata"]["name"]
    spec = JobSpec.from_dict(job.get("spec") or {})
    b.put("observedGeneration", b.generation)
    for counter in ("preemptions", "failures", "trialOOMs", "restarts", "restores"):
        if b.get(counter) is None:
            b.put(counter, 0)
    progress = _copy_progress(b, progress_configmap)
    b.decision.ignored = progress.ignored
    _apply_progress(b, progress)

    phase = b.get("phase") or st.PHASE_PENDING
    if b.get("phase") is None:
        b.put("phase", phase)
    attempt = _int(b.get("attempt"))
    started = bool(b.get("attemptStarted"))
    workers = spec.distribution.workers
    worker_names = [names.pod_name(name, i) for i in range(workers)]
    foreign = [p for p in pods if _foreign(p, job)]
    pods = [p for p in pods if not _foreign(p, job)]
    current = {
        p["metadata"]["name"]: p
        for p in pods
        if _attempt_of(p) == str(attempt) and p["metadata"]["name"] in worker_names
    }
    stale = [p for p in pods if p["metadata"]["name"] not in current]
    _delete_alive(b, stale)
    errors = validate(spec)
    script_error = _script_error(spec, configmaps)

    if phase in st.TERMINAL_PHASES:
        failed = st.get_condition(b.conditions, st.COND_FAILED) or {}
        # A spec edit may fix what the trainer rejected; what the operator rejected is
        # re-checked every pass (a fixed ConfigMap changes no generation).
        reopen = (
            phase == st.PHASE_FAILED
            and failed.get("reason") == "InvalidSpec"
            and (
                failed.get("observedGeneration") != b.generation
                or str(failed.get("message", "")).startswith(INVALID_SPEC_PREFIX)
            )
            and not errors
            and script_error is None
        )
        if not reopen:
            # what the operator rejected itself is re-checked every pass (see above)
            b.decision.finished = not (
                failed.get("reason") == "InvalidSpec"
                and str(failed.get("message", "")).startswith(INVALID_SPEC_PREFIX)
            )
            if phase == st.PHASE_FAILED:
                _delete_alive(b, list(current.values()))
            else:
                _delete_alive(b, list(current.values()), keep_ended=True)
            _ttl(b, spec)
            return b.decision
        phase = st.PHASE_PENDING
        b.put("phase", phase)
        b.put("completionTime", None)
        b.cond(st.COND_FAILED, False, "SpecChanged", "the spec changed; trying again")
        b.event("Normal", "SpecChanged", "the spec is valid now; starting the trainer again")
        if started:
            attempt += 1
            b.put("attempt", attempt)
            b.put("attemptStarted", False)
            started = False
            _delete_alive(b, list(current.values()))
            current = {}

    if errors:
        message = INVALID_SPEC_PREFIX + "; ".join(str(e) for e in errors)
        _delete_alive(b, list(current.values()))
        _finish(b, succeeded=False, reason="InvalidSpec", message=message)
        return b.decision

    if spec.suspend:
        if phase != st.PHASE_SUSPENDED:
            b.put("phase", st.PHASE_SUSPENDED)
            b.cond(st.COND_SUSPENDED, True, "Suspended", "spec.suspend is true")
            b.cond(st.COND_RUNNING, False, "Suspended", "")
            b.cond(st.COND_STALLED, False, "Suspended", "")
            b.event(
                "Normal",
                "Suspended",
                "stopping the trainer pods gracefully (they checkpoint); the volume is kept",
            )
            if started:
                b.put("attempt", attempt + 1)
                b.put("attemptStarted", False)
        _delete_alive(b, pods)
        b.put("message", "suspended" if not pods else f"suspending: {len(pods)} pod(s) stopping")
        return b.decision
    if phase == st.PHASE_SUSPENDED:
        phase = st.PHASE_PENDING
        b.put("phase", phase)
        b.cond(st.COND_SUSPENDED, False, "Resumed", "spec.suspend is false")
        b.event("Normal", "Resumed", "resuming the search from the checkpoint volume")

    if not started:
        if stale:
            b.put("message", f"waiting for {len(stale)} old trainer pod(s) to terminate")
            return b.decision
        if foreign:
            b.put("message", f"waiting for {len(foreign)} pod(s) of an earlier TuningJob {name!r}")
            return b.decision
        retry = st.parse_time(b.get("nextRetryTime"))
        if retry is not None and b.now < retry:
            b.put("message", f"retrying at {st.rfc3339(retry)} (backoff after a failure)")
            b.decision.requeue_after = (retry - b.now).total_seconds()
            return b.decision
        # checked before every pod group: the map may have changed since the last one
        if script_error is not None:
            _finish(
                b,
                succeeded=False,
                reason="InvalidSpec",
                message=INVALID_SPEC_PREFIX + str(script_error),
            )
            return b.decision
        if _script_missing(spec, configmaps):
            _wait_for_script(b, spec)
            return b.decision
        b.decision.ensure_children = True
        b.decision.create_pods = list(range(workers))
        b.decision.create_attempt = attempt
        b.put("attempt", attempt)
        b.put("attemptStarted", True)
        b.put("attemptStartTime", st.rfc3339(b.now))
        b.put("nextRetryTime", None)
        if not b.get("startTime"):
            b.put("startTime", st.rfc3339(b.now))
        if attempt > 0:
            # what the new trainer reports from now on is about this group
            b.decision.status["progress"] = {
                **(b.decision.status.get("progress") or {}),
                "resumedFromStep": None,
                "resumedFromEpoch": None,
            }
            b.put("restoreBaseline", progress.count("restores") or 0)
        b.put("message", f"starting trainer pod group {attempt} ({workers} worker(s))")
        b.event(
            "Normal",
            "Created",
            f"created trainer pod group {attempt}: "
            + ", ".join(worker_names)
            + (" (resuming from the checkpoint volume)" if attempt > 0 else ""),
        )
        return b.decision

    outcomes: dict[str, Classification] = {}
    for pod_name in worker_names:
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
            if seen is not None and _attempt_of(seen) != str(attempt):
                seen = None
            outcomes[pod_name] = classify_missing(seen)
    group = list(current.values())
    kinds = {c.outcome for c in outcomes.values()}
    chief = outcomes[worker_names[0]]
    fp = spec.failure_policy

    if chief.outcome == Outcome.COMPLETED and not kinds & {Outcome.FAILED, Outcome.INVALID_SPEC}:
        _delete_alive(b, group, keep_ended=True)
        _apply_final(b, chief)
        _finish(b, succeeded=True, reason="Completed", message=f"search completed: {_best_text(b)}")
        _ttl(b, spec)
        return b.decision

    if Outcome.INVALID_SPEC in kinds:
        bad = next(
            f"{n}: {c.message}" for n, c in outcomes.items() if c.outcome == Outcome.INVALID_SPEC
        )
        _delete_alive(b, group)
        _finish(
            b, succeeded=False, reason="InvalidSpec", message=f"trainer rejected the spec: {bad}"
        )
        return b.decision

    if _preemption_wins(outcomes):
        # disruption wins: other workers of a MultiWorkerMirrored group often crash
        # (exit 1) once a peer is gone, which is not their failure
        what = ", ".join(
            f"{n}: {c.reason}" for n, c in outcomes.items() if c.outcome == Outcome.PREEMPTED
        )
        preemptions = b.count("preemptions")
        _delete_alive(b, group)
        if preemptions > fp.max_preemptions:
            _finish(
                b,
                succeeded=False,
                reason="PreemptionBudgetExceeded",
                message=f"{preemptions} preemptions exceed failurePolicy.maxPreemptions="
                f"{fp.max_preemptions}; last: {what}",
            )
            return b.decision
        b.event(
            "Warning",
            "Preempted",
            f"trainer pod group {attempt} disrupted ({what}); recreating "
            + ("all workers" if workers > 1 else "the trainer")
            + ", it resumes from the checkpoint",
        )
        b.put("attempt", attempt + 1)
        b.put("attemptStarted", False)
        b.count("restarts")
        b.put("message", f"preempted ({what}); recreating the trainer pod group")
        b.cond(st.COND_RUNNING, False, "Preempted", what)
        return b.decision

    if Outcome.FAILED in kinds and _trial_out_of_memory(b, outcomes, progress):
        _record_trial_oom(b, outcomes, progress, spec, group, attempt)
        return b.decision

    if Outcome.FAILED in kinds:
        what = "; ".join(
            f"{n}: {c.reason}: {c.message}"
            for n, c in outcomes.items()
            if c.outcome == Outcome.FAILED
        )
        failures = b.count("failures")
        _delete_alive(b, group)
        if failures > fp.max_failures:
            _finish(
                b,
                succeeded=False,
                reason="FailureBudgetExceeded",
                message=f"{failures} trainer failures exceed failurePolicy.maxFailures="
                f"{fp.max_failures}; last: {what}",
            )
            return b.decision
        delay = fp.backoff(failures)
        b.event(
            "Warning",
            "TrainerFailed",
            f"trainer failed ({failures}/{fp.max_failures} tolerated): {what}; retry in {delay}s",
        )
        b.put("attempt", attempt + 1)
        b.put("attemptStarted", False)
        b.count("restarts")
        b.put("nextRetryTime", st.rfc3339(b.now + dt.timedelta(seconds=delay)))
        b.put("message", f"trainer failed: {what}; retrying in {delay}s")
        b.cond(st.COND_RUNNING, False, "TrainerFailed", what)
        b.decision.requeue_after = float(delay)
        return b.decision

    if Outcome.TERMINATING in kinds:
        b.put("message", "a trainer pod is being deleted; waiting for its checkpoint")
        return b.decision

    if all(
        c.outcome == Outcome.RUNNING or c.outcome == Outcome.COMPLETED for c in outcomes.values()
    ):
        if phase != st.PHASE_RUNNING:
            b.put("phase", st.PHASE_RUNNING)
        b.cond(st.COND_RUNNING, True, "TrainerRunning", f"{workers} trainer pod(s) running")
        _report_restore(b, attempt, progress)
        _check_stall(b, spec)
        trial = b.get("currentTrial")
        b.put(
            "message",
            f"running trial {trial}, {b.get('trials')} trials done" if trial else "trainer running",
        )
    else:
        pending = ", ".join(
            f"{n}: {c.reason}" for n, c in outcomes.items() if c.outcome == Outcome.PENDING
        )
        if _script_missing(spec, configmaps):
            # deleted after the check: the kubelet retries the mount until it is back
            pending += (
                f"; ConfigMap {spec.script_configmap!r} (spec.script.configMap.name) not "
                "found: the pods start once it exists"
            )
        b.cond(st.COND_RUNNING, False, "PodsPending", pending)
        b.put("message", f"waiting for trainer pods ({pending})")
    return b.decision


TRIAL_OOM = "TrialOutOfMemory"
"""Reason (Event, condition Running) of a trial recorded FAILED for running out of memory."""


def _trial_out_of_memory(
    b: _Builder, outcomes: Mapping[str, Classification], progress: ProgressView
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


def _record_trial_oom(
    b: _Builder,
    outcomes: Mapping[str, Classification],
    progress: ProgressView,
    spec: JobSpec,
    group: list[Obj],
    attempt: int,
) -> None:
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
    _delete_alive(b, group)
    limits = (spec.resources.get("limits") or {}).get("memory")
    memory = f" (limit {limits})" if limits else ""
    advice = (
        f"raise spec.resources.limits.memory{memory} (and requests.memory), or shrink the "
        "search space (the hyperparameter ranges or batch size that make the model this large)"
    )
    if ooms > fp.max_trial_ooms:
        _finish(
            b,
            succeeded=False,
            reason="TrialOOMBudgetExceeded",
            message=f"{ooms} trials ran out of memory, more than failurePolicy.maxTrialOOMs="
            f"{fp.max_trial_ooms}; last: trial {trial} ({who}); {advice}",
        )
        return
    b.event(
        "Warning",
        TRIAL_OOM,
        f"trial {trial} ran out of memory ({who}); it is recorded FAILED and the search "
        f"goes on with the next trial ({ooms}/{fp.max_trial_ooms} tolerated); {advice}",
    )
    b.put("attempt", attempt + 1)
    b.put("attemptStarted", False)
    b.count("restarts")
    b.put("nextRetryTime", None)
    b.put("message", f"trial {trial} ran out of memory; recreating the trainer pod group")
    b.cond(st.COND_RUNNING, False, TRIAL_OOM, f"trial {trial} ran out of memory ({who})")


def _preemption_wins(outcomes: Mapping[str, Classification]) -> bool:
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


def _report_restore(b: _Builder, attempt: int, progress: ProgressView) -> None:
    """A recreated group's trainer restored from the volume: it reports the step it
    resumed at (> 0 mid-epoch) or, at an epoch boundary, a higher `restores` count."""
    if attempt <= 0 or progress.empty or b.get("restoredAttempt") == attempt:
        return
    resumed = progress.count("resumedFromStep") or 0
    count = progress.count("restores") or 0
    if resumed <= 0 and count <= _int(b.get("restoreBaseline")):
        return
    b.count("restores")
    b.put("restoredAttempt", attempt)
    epoch = progress.count("resumedFromEpoch")
    where = f"at step {resumed}" if resumed > 0 else "at an epoch boundary"
    if epoch is not None:
        where += f" of epoch {epoch}"
    b.event(
        "Normal",
        "Restored",
        f"trainer pod group {attempt} resumed trial {progress.text('trialId')} {where} "
        "from the checkpoint",
    )


def _check_stall(b: _Builder, spec: JobSpec) -> None:
    times = [st.parse_time(b.get("lastProgressTime")), st.parse_time(b.get("attemptStartTime"))]
    known = [t for t in times if t is not None]
    if not known:
        return
    idle = (b.now - max(known)).total_seconds()
    stalled = st.condition_is(b.conditions, st.COND_STALLED)
    if idle > spec.stall_timeout_seconds:
        if not stalled:
            message = (
                f"no progress for {int(idle)}s (stallTimeoutSeconds={spec.stall_timeout_seconds})"
            )
            b.cond(st.COND_STALLED, True, "NoProgress", message)
            b.event("Warning", "Stalled", message)
    elif stalled or st.get_condition(b.conditions, st.COND_STALLED) is None:
        b.cond(st.COND_STALLED, False, "Progressing", "")
