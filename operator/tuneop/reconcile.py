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

import datetime as dt
from collections.abc import Mapping
from typing import Any

from . import status as st
from .classify import needs_node
from .decision import (
    INVALID_SPEC_PREFIX,
    Builder,
    Decision,
    Event,
    PodRef,
    apply_final,
    apply_progress,
    attempt_of,
    best_text,
    copy_progress,
    delete_alive,
    finish,
    foreign,
    int_of,
    reopen_or_stay,
    resume_if_suspended,
    script_error,
    script_missing,
    suspend,
    ttl,
    wait_for_script,
)
from .group_step import (
    Slot,
    apply_stall_policy,
    backoff_wait,
    classify_group,
    current_pods,
    held_pods,
    judge_stall,
    queued_condition,
    release_held,
    run_group,
    running_stuck,
    start_group,
    waiting_stuck,
)
from .groups import pod_groups, sequential_group
from .progress import ProgressView
from .queue import QUEUED
from .spec import JobSpec, validate

Obj = dict[str, Any]

__all__ = ["Decision", "Event", "PodRef", "decide", "nodes_to_read"]


def nodes_to_read(job: Obj, pods: list[Obj], spec: JobSpec | None = None) -> list[str]:
    """The nodes `decide` will consult: those of the running pod groups' pods that are
    bound and have not ended. Nothing while no group runs or once the job is finished.
    `spec`: the job's parsed spec (parsed here when not given)."""
    status = job.get("status") or {}
    if status.get("phase") in st.TERMINAL_PHASES:
        return []
    spec = spec or JobSpec.from_dict(job.get("spec") or {})
    name = job["metadata"]["name"]
    attempts: dict[str, str] = {}  # pod name -> the attempt of its group that runs
    if spec.parallel:
        entries = {e.get("name"): e for e in status.get("groups") or [] if isinstance(e, dict)}
        for group in pod_groups(name, spec):
            entry = entries.get(group.name) or {}
            if entry.get("started"):
                for pod_name in group.pod_names:
                    attempts[pod_name] = str(int_of(entry.get("attempt")))
    elif status.get("attemptStarted"):
        for pod_name in sequential_group(name, spec).pod_names:
            attempts[pod_name] = str(int_of(status.get("attempt")))
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
    here when not given)."""
    nodes = nodes or {}
    last_seen = last_seen or {}
    configmaps = configmaps or {}
    b = Builder(job, now)
    b.workloads = workloads or {}
    spec = spec or JobSpec.from_dict(job.get("spec") or {})
    b.put("observedGeneration", b.generation)
    for counter in ("preemptions", "failures", "trialOOMs", "restarts", "restores"):
        if b.get(counter) is None:
            b.put(counter, 0)
    if b.get("phase") is None:
        b.put("phase", st.PHASE_PENDING)
    if spec.parallel:
        from .reconcile_parallel import decide_parallel  # it builds on this module

        decision = decide_parallel(
            b,
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
            b, spec, pods, nodes, last_seen, configmaps, progress_configmap
        )
    decision.recoveries = b.ledger.finish(b.live_pods)
    return decision


def _decide_sequential(
    b: Builder,
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
    job = b.job
    progress = copy_progress(b, progress_configmap)
    b.decision.ignored = progress.ignored
    apply_progress(b, progress)

    slot = Slot(b, sequential_group(job["metadata"]["name"], spec))
    others = [p for p in pods if foreign(p, job)]
    pods = [p for p in pods if not foreign(p, job)]
    current = current_pods(slot, pods)
    stale = [p for p in pods if p["metadata"]["name"] not in current]
    delete_alive(b, stale)
    stopping = b.get("phase") in st.TERMINAL_PHASES or spec.suspend
    release_held(b, pods, set(current), stopping)

    kept = _stop_phase(b, spec, slot, pods, current, configmaps)
    if kept is None:
        return b.decision
    if not slot.started:
        _start_phase(b, spec, slot, stale, others, configmaps, progress)
    else:
        _follow_phase(b, spec, slot, kept, nodes, last_seen, configmaps, progress)
    return b.decision


def _stop_phase(
    b: Builder,
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
    if b.get("phase") in st.TERMINAL_PHASES:
        bad_script = script_error(spec, configmaps)
        if reopen_or_stay(b, spec, [slot], list(current.values()), errors, bad_script):
            return None
        current = {}
    gpus = spec.distribution.gpus_per_worker
    if errors:
        message = INVALID_SPEC_PREFIX + "; ".join(str(e) for e in errors)
        delete_alive(b, list(current.values()))
        b.ledger.close(current.values(), gpus)
        finish(b, succeeded=False, reason="InvalidSpec", message=message)
        return None
    if spec.suspend:
        if slot.started:
            b.ledger.close(current.values(), gpus)
        suspend(b, [slot], pods)
        return None
    resume_if_suspended(b)
    return current


def _start_phase(
    b: Builder,
    spec: JobSpec,
    slot: Slot,
    stale: list[Obj],
    others: list[Obj],
    configmaps: Mapping[str, Obj | None],
    progress: ProgressView,
) -> None:
    """No group runs: wait for old pods, the backoff and the script's ConfigMap, then
    start the next pod group."""
    name = b.job["metadata"]["name"]
    if stale:
        b.put("message", f"waiting for {len(stale)} old trainer pod(s) to terminate")
        return
    if others:
        b.put("message", f"waiting for {len(others)} pod(s) of an earlier TuningJob {name!r}")
        return
    waiting = backoff_wait(b, slot)
    if waiting is not None:
        b.put("message", waiting)
        b.cond(st.COND_RUNNING, False, "Backoff", waiting)
        if b.get("phase") == st.PHASE_RUNNING:
            b.put("phase", st.PHASE_PENDING)
        return
    # checked before every pod group: the map may have changed since the last one
    bad_script = script_error(spec, configmaps)
    if bad_script is not None:
        finish(
            b, succeeded=False, reason="InvalidSpec", message=INVALID_SPEC_PREFIX + str(bad_script)
        )
        return
    if script_missing(spec, configmaps):
        wait_for_script(b, spec)
        return
    start_group(b, slot)
    attempt = slot.attempt
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
    workers = len(slot.group.pod_names)
    b.put("message", f"starting trainer pod group {attempt} ({workers} worker(s))")


def _follow_phase(
    b: Builder,
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
    result = run_group(b, spec, slot, current, outcomes, progress, held)
    if result.kind == "completed" and result.chief is not None:
        delete_alive(b, list(current.values()), keep_ended=True)
        apply_final(b, result.chief)
        finish(b, succeeded=True, reason="Completed", message=f"search completed: {best_text(b)}")
        ttl(b, spec)
        return
    if result.kind == "invalid":
        delete_alive(b, list(current.values()))
        finish(b, succeeded=False, reason="InvalidSpec", message=result.message)
        return
    queued = result.kind == "pending" and result.reason == QUEUED
    queued_condition(b, result.message if queued else None)
    if result.kind in ("running", "pending", "terminating") and not queued:
        stuck = (
            running_stuck(b, spec, slot, b.get("lastProgressTime"))
            if result.kind == "running"
            else waiting_stuck(b, spec, slot, result)
        )
        stalled = judge_stall(b, [stuck])
        acted = apply_stall_policy(b, spec, stalled, current) if stalled else None
        if acted is not None:
            result = acted
    if result.kind == "ended":
        return
    if result.kind != "running" and b.get("phase") == st.PHASE_RUNNING:
        b.put("phase", st.PHASE_PENDING)  # no trainer trains while the group is replaced
    if result.kind in ("recreate", "terminating"):
        b.put("message", result.summary)
        b.cond(st.COND_RUNNING, False, result.reason, result.message)
    elif result.kind == "running":
        if b.get("phase") != st.PHASE_RUNNING:
            b.put("phase", st.PHASE_RUNNING)
        workers = len(slot.group.pod_names)
        b.cond(st.COND_RUNNING, True, "TrainerRunning", f"{workers} trainer pod(s) running")
        trial = b.get("currentTrial")
        b.put(
            "message",
            f"running trial {trial}, {b.get('trials')} trials done" if trial else "trainer running",
        )
    elif result.kind == "pending":
        pending = result.message
        if script_missing(spec, configmaps):
            # deleted after the check: the kubelet retries the mount until it is back
            pending += (
                f"; ConfigMap {spec.script_configmap!r} (spec.script.configMap.name) not "
                "found: the pods start once it exists"
            )
        b.cond(st.COND_RUNNING, False, result.reason, pending)
        b.put("message", f"waiting for trainer pods ({pending})")
