"""Kueue: a TuningJob labelled `kueue.x-k8s.io/queue-name` is admitted by Kueue before
its pods use any GPU, through Kueue's plain-pod integration with pod groups.

Why pod groups and not a Workload the operator manages: Kueue's pod integration already
does what the job needs with objects the operator creates anyway (its webhook gates each
labelled pod, its controller creates one Workload per group once all
`pod-group-total-count` pods exist, admits the group whole, injects the flavor's node
selectors and tolerations when it lifts the gates, and evicts a group whole), while a
Workload of our own would need the operator to gate pods, assign flavors and follow
Kueue's Workload API across versions itself. Kueue's rules for pod groups (read in its
docs and checked against a running Kueue v0.17.0, tests/localcluster/test_kueue.py):

- every pod of a group carries the queue label, `pod-group-name` and the same
  `pod-group-total-count`; a group name is never reused once its Workload finished;
- a pod group's pods stay (finalizer `kueue.x-k8s.io/managed`) and its quota stays
  reserved, even after every pod is deleted, until the group is declared over: the
  annotation `kueue.x-k8s.io/retriable-in-group: "false"` on any of its pods;
- eviction (preemption by a higher priority, a stopped queue, ...) marks every pod with
  condition `TerminationTarget=True` (reason `WorkloadEvictedDueTo<Reason>`), no
  DisruptionTarget, and deletes them gracefully.

So each pod group of a job (every attempt of the sequential group, of the oracle, of each
trial group) is one Kueue pod group named `<job>-<uid prefix>[-<group>]-<attempt>`: a new
attempt is a new Workload that queues again. Pods the operator is done with are released
(the annotation) so the old Workload finishes and frees its quota at once.
Without Kueue installed the labels are inert: the pods run as any other."""

from __future__ import annotations

import hashlib
from typing import Any

Obj = dict[str, Any]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
RETRIABLE = "kueue.x-k8s.io/retriable-in-group"
FINALIZER = "kueue.x-k8s.io/managed"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
WORKLOAD_API = "/apis/kueue.x-k8s.io/v1beta2"

QUEUED = "Queued"
"""Reason (pending pods, condition Queued) while Kueue has not admitted the group."""
EVICTED_BY_KUEUE = "EvictedByKueue"
"""Disruption reason of a pod Kueue evicted (its TerminationTarget condition)."""

MAX_LABEL = 63


def queue_name(job: Obj) -> str:
    """The job's LocalQueue (its `kueue.x-k8s.io/queue-name` label), or ""."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    return str(labels.get(QUEUE_LABEL) or "")


def pod_group_name(job: Obj, group: str, attempt: int) -> str:
    """One Kueue pod group per pod group attempt, unique across jobs of the same name
    (the uid prefix): Kueue never runs pods under a finished group's name again."""
    meta = job["metadata"]
    uid = str(meta.get("uid") or "")[:5]
    name = "-".join(p for p in (meta["name"], uid, group, str(attempt)) if p)
    if len(name) <= MAX_LABEL:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: MAX_LABEL - 11]}-{digest}"


def pod_metadata(job: Obj, group: str, attempt: int, pods: int) -> tuple[Obj, Obj]:
    """(labels, annotations) of a queued job's pod; empty without a queue label."""
    queue = queue_name(job)
    if not queue:
        return {}, {}
    labels = {QUEUE_LABEL: queue, POD_GROUP_LABEL: pod_group_name(job, group, attempt)}
    return labels, {POD_GROUP_TOTAL: str(pods)}


def gated(pod: Obj) -> bool:
    """Kueue has not admitted the pod's group yet (its scheduling gate is still on)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, dict) and g.get("name") == ADMISSION_GATE for g in gates)


def eviction(pod: Obj) -> str | None:
    """Kueue's reason for evicting the pod (`TerminationTarget=True`), if it did."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "TerminationTarget" and cond.get("status") == "True":
            return str(cond.get("reason") or "TerminationTarget")
    return None


def held(pod: Obj) -> bool:
    """Kueue keeps the pod (finalizer) and its group has not been declared over."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return FINALIZER in (meta.get("finalizers") or []) and annotations.get(RETRIABLE) != "false"


def release_patch() -> Obj:
    """Merge patch declaring the pod's group over: Kueue finishes its Workload."""
    return {"metadata": {"annotations": {RETRIABLE: "false"}}}


def workload_name(pod: Obj) -> str | None:
    """The Workload of a queued pod's group: named after the group."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(POD_GROUP_LABEL)
    return str(value) if value else None


def queued_message(pod: Obj, workload: Obj | None) -> str:
    """What Kueue says about the group's admission (its QuotaReserved/Admitted
    condition message), or a generic line."""
    queue = ((pod.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("QuotaReserved", "Admitted") and cond.get("status") == "False":
            message = str(cond.get("message") or "").strip()
            if message:
                return f"LocalQueue {queue}: {message}"
    return f"waiting for Kueue to admit the pod group (LocalQueue {queue})"
