"""Steps on the job as a whole, shared by the sequential and the parallel decision: the
trainer's progress and final summary into status, finishing the job, deleting pods and
releasing the Kueue pod groups the operator is done with, the TTL, the script's
ConfigMap (checked, waited for). Reopening, suspend and resume: decide.lifecycle."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import tuneop_contract as contract
from tuneop_contract.spec import SpecError

from ..api import names, queue
from ..api import status as st
from ..api.progress import ProgressView, top_trials_status
from ..api.progress import from_configmap as progress_from_configmap
from ..api.progress import read as read_progress
from ..api.spec import check_script_configmap
from .classify import Classification, alive, classify
from .observed import Observed
from .patch import UNWATCHED_RECHECK_SECONDS, Draft, PodRef

Obj = dict[str, Any]

INVALID_SPEC_PREFIX = "invalid spec: "
"""Start of the message of an InvalidSpec found by the operator itself (the trainer's
starts otherwise): such a failure reopens as soon as the operator's checks pass."""
SCRIPT_MISSING = "ScriptConfigMapMissing"
"""Reason (condition Running, Warning Event) while spec.script.configMap does not exist."""

ScriptCheck = Callable[[], SpecError | None]
"""What is wrong with the script's ConfigMap or the existing claim (None: fine), asked
lazily."""

RESULT_FROM_SUMMARY = "TerminationMessage"
"""status.resultSource once the final trials/best came from the trainer's final summary;
from then on status.progress (possibly stale: a lost patch) no longer overrides them."""
RESULT_FROM_PROGRESS = "Progress"


def copy_progress(draft: Draft, configmap: Obj | None, tuner_id: str | None = None) -> ProgressView:
    """The trainer's record: the valid fields of what it reported to the progress
    ConfigMap, copied into status.progress (whole: fields it no longer reports are
    removed), or status.progress as it is while the map holds no record. Only this
    record comes from the trainer; phase, counters and budgets never do. `tuner_id`:
    whose record (a parallel job's oracle; None: the sequential trainer)."""
    name = names.progress_configmap_name(draft.seen.name)
    reported = progress_from_configmap(configmap, name, tuner_id)
    if reported is None:
        return read_progress(draft.old.get(st.PROGRESS))
    old = draft.old.get(st.PROGRESS)
    old = old if isinstance(old, dict) else {}
    if {k: v for k, v in old.items() if v is not None} != reported.values:
        draft.write(st.PROGRESS, {**dict.fromkeys(old), **reported.values})
    return reported


def apply_progress(draft: Draft, progress: ProgressView) -> None:
    if draft.old.get(st.RESULT_SOURCE) == RESULT_FROM_SUMMARY:
        return
    if progress.empty:
        if draft.get(st.TRIALS) is None:
            draft.put(st.TRIALS, "0/?")
        return
    done = progress.count("trialsCompleted") or 0
    total = progress.count("trialsTotal")
    draft.put(st.TRIALS_COMPLETED, done)
    if total is not None:
        draft.put(st.TRIALS_TOTAL, total)
    draft.put(st.TRIALS, f"{done}/{total if total is not None else '?'}")
    if progress.text("trialId"):
        draft.put(st.CURRENT_TRIAL, progress.text("trialId"))
    best_id = progress.text("bestTrialId")
    if best_id is not None:
        best: Obj = {"id": best_id}
        if progress.values.get("bestScore") is not None:
            best["score"] = progress.values["bestScore"]
        if progress.values.get("bestHyperparameters") is not None:
            best["hyperparameters"] = progress.values["bestHyperparameters"]
        draft.put(st.BEST_TRIAL, best)
    top = progress.values.get("topTrials")
    if top is not None:
        draft.put(st.TOP_TRIALS, top_trials_status(top))
    for key, field in (
        (st.LAST_PROGRESS_TIME, "lastProgressTime"),
        (st.LAST_CHECKPOINT_TIME, "lastCheckpointTime"),
    ):
        if progress.text(field):
            draft.put(key, progress.text(field))


def apply_final(draft: Draft, chief: Classification) -> None:
    """The completed chief's termination message holds the search's final summary: it
    wins over status.progress, whose last patches may never have arrived."""
    summary = contract.parse_final_summary(chief.message)
    if summary is None:  # an older trainer: the progress is all there is
        draft.put(st.RESULT_SOURCE, RESULT_FROM_PROGRESS)
        return
    total = summary.trials_total
    draft.put(st.TRIALS_COMPLETED, summary.trials_completed)
    if total is not None:
        draft.put(st.TRIALS_TOTAL, total)
    draft.put(st.TRIALS, f"{summary.trials_completed}/{total if total is not None else '?'}")
    if summary.best_trial_id is not None:
        old = draft.get(st.BEST_TRIAL) or {}
        best: Obj = {"id": summary.best_trial_id}
        if summary.best_score is not None:
            best["score"] = summary.best_score
        hps = summary.best_hyperparameters
        if hps is None and isinstance(old, dict) and old.get("id") == summary.best_trial_id:
            hps = old.get("hyperparameters")  # omitted from a summary too long to keep
        if hps is not None:
            best["hyperparameters"] = hps
        draft.put(st.BEST_TRIAL, best)
    top = read_progress({"topTrials": summary.top_trials}).values.get("topTrials")
    if top is not None:  # else: omitted from a summary too long; the progress's stay
        draft.put(st.TOP_TRIALS, top_trials_status(top))
    draft.put(st.RESULT_SOURCE, RESULT_FROM_SUMMARY)


def best_text(draft: Draft) -> str:
    best = draft.get(st.BEST_TRIAL) or {}
    if not best:
        return "no best trial reported"
    score = best.get("score")
    return f"best trial {best.get('id')} score {score if score is not None else '?'}"


def finish(draft: Draft, *, succeeded: bool, reason: str, message: str) -> None:
    draft.put(st.PHASE, st.PHASE_SUCCEEDED if succeeded else st.PHASE_FAILED)
    draft.put(st.COMPLETION_TIME, st.rfc3339(draft.now))
    draft.put(st.MESSAGE, message)
    draft.put(st.NEXT_RETRY_TIME, None)
    draft.put(st.PODS_REFUSED, None)
    draft.cond(st.COND_RUNNING, False, reason, message)
    draft.cond(st.COND_STALLED, False, reason, "")
    if succeeded:
        draft.cond(st.COND_COMPLETE, True, reason, message)
        draft.event("Normal", "Completed", message)
    else:
        draft.cond(st.COND_FAILED, True, reason, message)
        draft.event("Warning", reason, message)
    if reason == "InvalidSpec" and message.startswith(INVALID_SPEC_PREFIX):
        draft.decision.wake_within(UNWATCHED_RECHECK_SECONDS)  # see lifecycle.reopen_or_stay


def delete_alive(draft: Draft, pods: list[Obj], *, keep_ended: bool = False) -> None:
    for pod in pods:
        if not alive(pod):
            continue
        if keep_ended and classify(pod).ended:
            continue
        name = pod["metadata"]["name"]
        if name not in [ref.name for ref in draft.decision.delete_pods]:
            draft.decision.delete_pods.append(PodRef(name, pod["metadata"].get("uid")))


def stop_group(draft: Draft, pods: Mapping[str, Obj], gpus_per_pod: int) -> None:
    """The operator stops a group (for another shape, or a stall): its pods go, and
    their GPU time ends and is no longer counted as held (goodput)."""
    delete_alive(draft, list(pods.values()))
    draft.ledger.stopped(list(pods.values()), gpus_per_pod)


def ttl(draft: Draft) -> None:
    spec = draft.spec
    ttl = spec.ttl_seconds_after_finished
    if ttl is None:
        return
    done = st.parse_time(draft.get(st.COMPLETION_TIME)) or draft.now
    left = (done + dt.timedelta(seconds=int(ttl)) - draft.now).total_seconds()
    if left <= 0:
        draft.decision.delete_job = True
    else:
        draft.decision.wake_within(left)


def script_missing(seen: Observed) -> bool:
    name = seen.spec.script_configmap
    return bool(name) and seen.scripts.get(name) is None


def script_error(seen: Observed) -> SpecError | None:
    """What is wrong with an existing spec.script.configMap (None: fine or missing)."""
    name = seen.spec.script_configmap
    configmap = seen.scripts.get(name) if name else None
    return check_script_configmap(seen.spec, configmap) if configmap is not None else None


def wait_for_script(draft: Draft) -> None:
    """The user's ConfigMap does not exist (yet: `kubectl apply -f dir/` or a GitOps tool
    may create it after the job). Wait for it rather than fail, but visibly; never
    create pods that would sit in ContainerCreating until it appears."""
    spec = draft.spec
    name, ns = spec.script_configmap, draft.seen.job["metadata"]["namespace"]
    key = spec.script.key if spec.script is not None and spec.script.key else None
    message = (
        f"waiting for ConfigMap {name!r} (spec.script.configMap.name) in namespace {ns!r}; "
        f"create it, e.g. kubectl create configmap {name} -n {ns} "
        f"--from-file={key or contract.DEFAULT_SCRIPT_KEY}"
    )
    running = st.get_condition(draft.conditions, st.COND_RUNNING) or {}
    if running.get("reason") != SCRIPT_MISSING:
        draft.event("Warning", SCRIPT_MISSING, message)
    draft.cond(st.COND_RUNNING, False, SCRIPT_MISSING, message)
    draft.decision.wake_within(UNWATCHED_RECHECK_SECONDS)
    draft.put(st.MESSAGE, message)


def release_held(draft: Draft, pods: list[Obj], keep: set[str], stopping: bool) -> None:
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
            draft.decision.release_pods.append(PodRef(name, meta.get("uid")))
