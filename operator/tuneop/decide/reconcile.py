"""The level-based decision, as a pure function: given the TuningJob (spec + status),
its pods and what is known of their nodes, return what to change. No API calls here:
act.executor applies a Decision, tests/unit/test_operator_reconcile.py drives this
function through whole scenarios (preemption, failures and backoff, budgets, suspend,
restore reporting, stall, TTL).

Idempotence: counters move only together with `status.attempt` (the pod group index)
in one status patch, which the executor writes before it deletes anything; pods of an
older group are deleted without being counted again. Pods are created (by name, 409 is
fine) before `attemptStarted` is written, so a restart between the two creates nothing
twice and counts nothing."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from ..api import status as st
from ..api.groups import pod_groups, sequential_group
from ..api.owners import foreign
from ..api.progress import ProgressView
from ..api.queue import QUEUED
from ..api.spec import JobSpec, validate
from .classify import attempt_of, needs_node
from .group import (
    backoff_wait,
    classify_group,
    current_pods,
    held_pods,
    queued_condition,
    release_held,
    run_group,
    start_group,
)
from .job import (
    INVALID_SPEC_PREFIX,
    apply_final,
    apply_progress,
    best_text,
    copy_progress,
    delete_alive,
    finish,
    reopen_or_stay,
    resume_if_suspended,
    script_error,
    script_missing,
    suspend,
    ttl,
    wait_for_script,
)
from .parallel import decide_parallel
from .patch import Decision, Draft, Refusal
from .refusal import hold_back, refused_stuck
from .slot import GroupResult, Slot
from .stall import apply_stall_policy, judge_stall, running_stuck, waiting_stuck

Obj = dict[str, Any]

__all__ = ["decide", "nodes_to_read"]


def nodes_to_read(job: Obj, pods: list[Obj], spec: JobSpec | None = None) -> list[str]:
    """The nodes `decide` will consult: those of the running pod groups' pods that are
    bound and have not ended. Nothing while no group runs or once the job is finished.
    `spec`: the job's parsed spec (parsed here when not given)."""
    status = job.get("status") or {}
    if status.get(st.PHASE) in st.TERMINAL_PHASES:
        return []
    spec = spec or JobSpec.from_dict(job.get("spec") or {})
    name = job["metadata"]["name"]
    attempts: dict[str, str] = {}  # pod name -> the attempt of its group that runs
    if spec.parallel:
        entries = {
            e.get(st.GROUP_NAME): e for e in status.get(st.GROUPS) or [] if isinstance(e, dict)
        }
        for group in pod_groups(name, spec):
            entry = entries.get(group.name) or {}
            if entry.get(st.GROUP_STARTED):
                for pod_name in group.pod_names:
                    attempts[pod_name] = str(st.int_of(entry.get(st.ATTEMPT)))
    elif status.get(st.ATTEMPT_STARTED):
        for pod_name in sequential_group(name, spec).pod_names:
            attempts[pod_name] = str(st.int_of(status.get(st.ATTEMPT)))
    return sorted(
        {
            str(pod["spec"]["nodeName"])
            for pod in pods
            if attempts.get(pod["metadata"]["name"]) == attempt_of(pod)
            and not foreign(pod, job)
            and needs_node(pod)
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
    claim: Obj | None = None,
    workloads: Mapping[str, Obj | None] | None = None,
    spec: JobSpec | None = None,
    refused: Refusal | None = None,
) -> Decision:
    """What to do next for `job`. `pods`: the job's pods (by label). `nodes`: Node objects
    by name, None for a node known not to exist (names absent = unknown). `last_seen`:
    the last version of each pod the watch delivered (says why a vanished pod went).
    `configmaps`: the ConfigMap named by spec.script.configMap, by name (None or absent
    = not found), read before each decision so no pod is created without it.
    `progress_configmap`: the job's progress ConfigMap, where the trainer reports; its
    valid fields are copied into status.progress (None or empty: status.progress as it is).
    `claim`: spec.checkpoint.existingClaim as read (parallel jobs check its access modes;
    None: not read or not found). `workloads`: Kueue Workloads of the job's queued pod
    groups, by name (their admission message). `spec`: the job's parsed spec (parsed
    here when not given). `refused`: what the API server answered when this pass's
    first decision was applied (decide.refusal): no group starts in this one."""
    nodes = nodes or {}
    last_seen = last_seen or {}
    configmaps = configmaps or {}
    draft = Draft(job, now)
    draft.workloads = workloads or {}
    draft.refused = refused
    spec = spec or JobSpec.from_dict(job.get("spec") or {})
    draft.put(st.OBSERVED_GENERATION, draft.generation)
    for counter in st.COUNTERS:
        if draft.get(counter) is None:
            draft.put(counter, 0)
    if draft.get(st.PHASE) is None:
        draft.put(st.PHASE, st.PHASE_PENDING)
    if spec.parallel:
        decision = decide_parallel(
            draft,
            spec,
            pods,
            nodes=nodes,
            last_seen=last_seen,
            configmaps=configmaps,
            progress_configmap=progress_configmap,
            claim=claim,
        )
    else:
        decision = _decide_sequential(
            draft, spec, pods, nodes, last_seen, configmaps, progress_configmap
        )
    decision.recoveries = draft.ledger.finish(draft.live_pods)
    return decision


def _decide_sequential(
    draft: Draft,
    spec: JobSpec,
    pods: list[Obj],
    nodes: Mapping[str, Obj | None],
    last_seen: Mapping[str, Obj],
    configmaps: Mapping[str, Obj | None],
    progress_configmap: Obj | None,
) -> Decision:
    """The sequential job (one pod group) in three phases: stop what must stop (a
    finished, invalid or suspended job), start a group when none runs, or follow the
    running one."""
    job = draft.job
    progress = copy_progress(draft, progress_configmap)
    draft.decision.ignored = progress.ignored
    apply_progress(draft, progress)

    slot = Slot(draft, sequential_group(job["metadata"]["name"], spec))
    others = [p for p in pods if foreign(p, job)]
    pods = [p for p in pods if not foreign(p, job)]
    current = current_pods(slot, pods)
    stale = [p for p in pods if p["metadata"]["name"] not in current]
    delete_alive(draft, stale)
    stopping = draft.get(st.PHASE) in st.TERMINAL_PHASES or spec.suspend
    release_held(draft, pods, set(current), stopping)

    kept = _stop_phase(draft, spec, slot, pods, current, configmaps)
    if kept is None:
        return draft.decision
    if not slot.started:
        _start_phase(draft, spec, slot, stale, others, configmaps, progress)
    else:
        _follow_phase(draft, spec, slot, kept, nodes, last_seen, configmaps, progress)
    return draft.decision


def _stop_phase(
    draft: Draft,
    spec: JobSpec,
    slot: Slot,
    pods: list[Obj],
    current: dict[str, Obj],
    configmaps: Mapping[str, Obj | None],
) -> dict[str, Obj] | None:
    """A finished job stays finished (or reopens), an invalid spec fails the job, a
    suspended job stops its group. None: the decision is complete; else the current
    pods the job goes on with."""
    errors = validate(spec)
    if draft.get(st.PHASE) in st.TERMINAL_PHASES:
        bad_script = script_error(spec, configmaps)
        if reopen_or_stay(draft, spec, [slot], list(current.values()), errors, bad_script):
            return None
        current = {}
    gpus = spec.distribution.gpus_per_worker
    if errors:
        message = INVALID_SPEC_PREFIX + "; ".join(str(e) for e in errors)
        delete_alive(draft, list(current.values()))
        draft.ledger.close(current.values(), gpus)
        finish(draft, succeeded=False, reason="InvalidSpec", message=message)
        return None
    if spec.suspend:
        if slot.started:
            draft.ledger.close(current.values(), gpus)
        suspend(draft, [slot], pods)
        return None
    resume_if_suspended(draft)
    return current


def _start_phase(
    draft: Draft,
    spec: JobSpec,
    slot: Slot,
    stale: list[Obj],
    others: list[Obj],
    configmaps: Mapping[str, Obj | None],
    progress: ProgressView,
) -> None:
    """No group runs: wait for old pods, the backoff and the script's ConfigMap, then
    start the next pod group."""
    name = draft.job["metadata"]["name"]
    if stale:
        draft.put(st.MESSAGE, f"waiting for {len(stale)} old trainer pod(s) to terminate")
        return
    if others:
        draft.put(st.MESSAGE, f"waiting for {len(others)} pod(s) of an earlier TuningJob {name!r}")
        return
    waiting = backoff_wait(draft, slot)
    if waiting is not None:
        draft.put(st.MESSAGE, waiting)
        draft.cond(st.COND_RUNNING, False, "Backoff", waiting)
        if draft.get(st.PHASE) == st.PHASE_RUNNING:
            draft.put(st.PHASE, st.PHASE_PENDING)
        return
    # checked before every pod group: the map may have changed since the last one
    bad_script = script_error(spec, configmaps)
    if bad_script is not None:
        finish(
            draft,
            succeeded=False,
            reason="InvalidSpec",
            message=INVALID_SPEC_PREFIX + str(bad_script),
        )
        return
    if script_missing(spec, configmaps):
        wait_for_script(draft, spec)
        return
    if draft.refused is not None:
        _refused(draft, spec, slot, draft.refused)
        return
    start_group(draft, slot)
    attempt = slot.attempt
    if not draft.get(st.START_TIME):
        draft.put(st.START_TIME, st.rfc3339(draft.now))
    if attempt > 0:
        # what the new trainer reports from now on is about this group
        draft.decision.status[st.PROGRESS] = {
            **(draft.decision.status.get(st.PROGRESS) or {}),
            "resumedFromStep": None,
            "resumedFromEpoch": None,
        }
        draft.put(st.RESTORE_BASELINE, progress.count("restores") or 0)
    workers = len(slot.group.pod_names)
    draft.put(st.MESSAGE, f"starting trainer pod group {attempt} ({workers} worker(s))")


def _refused(draft: Draft, spec: JobSpec, slot: Slot, refusal: Refusal) -> None:
    """The API server refused the group this pass was starting: hold it back, judge it
    for Stalled (and stallPolicy) since its first refusal, and say why it waits."""
    result = hold_back(draft, slot, refusal)
    stalled = judge_stall(draft, [refused_stuck(draft, spec, slot, result)])
    if stalled is not None and apply_stall_policy(draft, spec, stalled, {}) is not None:
        return
    _report(draft, spec, slot, {}, result)


def _follow_phase(
    draft: Draft,
    spec: JobSpec,
    slot: Slot,
    current: dict[str, Obj],
    nodes: Mapping[str, Obj | None],
    last_seen: Mapping[str, Obj],
    configmaps: Mapping[str, Obj | None],
    progress: ProgressView,
) -> None:
    """The group runs: classify its pods, apply the outcome (success, recreate, backoff),
    judge a stall, and report the phase, condition and message."""
    outcomes = classify_group(slot, current, nodes, last_seen)
    held = held_pods(slot, current, last_seen)
    result = run_group(draft, spec, slot, current, outcomes, progress, held)
    if result.kind == "completed" and result.chief is not None:
        delete_alive(draft, list(current.values()), keep_ended=True)
        apply_final(draft, result.chief)
        message = f"search completed: {best_text(draft)}"
        finish(draft, succeeded=True, reason="Completed", message=message)
        ttl(draft, spec)
        return
    if result.kind == "invalid":
        delete_alive(draft, list(current.values()))
        finish(draft, succeeded=False, reason="InvalidSpec", message=result.message)
        return
    result = _judge_stall(draft, spec, slot, current, result)
    if result.kind != "ended":
        _report(draft, spec, slot, configmaps, result)


def _judge_stall(
    draft: Draft, spec: JobSpec, slot: Slot, current: dict[str, Obj], result: GroupResult
) -> GroupResult:
    """Condition Queued, and a group that runs, waits or terminates judged for Stalled
    (not while Kueue holds it); the stall policy's result when it acted."""
    queued = result.kind == "pending" and result.reason == QUEUED
    queued_condition(draft, result.message if queued else None)
    if result.kind not in ("running", "pending", "terminating") or queued:
        return result
    stuck = (
        running_stuck(draft, spec, slot, draft.get(st.LAST_PROGRESS_TIME))
        if result.kind == "running"
        else waiting_stuck(draft, spec, slot, result)
    )
    stalled = judge_stall(draft, [stuck])
    acted = apply_stall_policy(draft, spec, stalled, current) if stalled else None
    return acted if acted is not None else result


def _report(
    draft: Draft,
    spec: JobSpec,
    slot: Slot,
    configmaps: Mapping[str, Obj | None],
    result: GroupResult,
) -> None:
    """Phase, condition Running and message of a job whose group goes on."""
    if result.kind != "running" and draft.get(st.PHASE) == st.PHASE_RUNNING:
        draft.put(st.PHASE, st.PHASE_PENDING)  # no trainer trains while the group is replaced
    if result.kind in ("recreate", "terminating", "refused"):
        draft.put(st.MESSAGE, result.summary)
        draft.cond(st.COND_RUNNING, False, result.reason, result.message)
    elif result.kind == "running":
        if draft.get(st.PHASE) != st.PHASE_RUNNING:
            draft.put(st.PHASE, st.PHASE_RUNNING)
        workers = len(slot.group.pod_names)
        draft.cond(st.COND_RUNNING, True, "TrainerRunning", f"{workers} trainer pod(s) running")
        trial = draft.get(st.CURRENT_TRIAL)
        trials = draft.get(st.TRIALS)
        draft.put(
            st.MESSAGE,
            f"running trial {trial}, {trials} trials done" if trial else "trainer running",
        )
    elif result.kind == "pending":
        pending = result.message
        if script_missing(spec, configmaps):
            # deleted after the check: the kubelet retries the mount until it is back
            pending += (
                f"; ConfigMap {spec.script_configmap!r} (spec.script.configMap.name) not "
                "found: the pods start once it exists"
            )
        draft.cond(st.COND_RUNNING, False, result.reason, pending)
        draft.put(st.MESSAGE, f"waiting for trainer pods ({pending})")
