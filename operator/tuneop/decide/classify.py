"""Pure classification of a trainer pod: is it running, done, disrupted or failed?

Disruption is not failure. A pod lost to scheduler preemption, the Eviction API, the
taint manager, the kubelet (node pressure / shutdown), node loss, deletion by someone
other than the operator, or a trainer that exited with the contract's "preempted" code
is `PREEMPTED` and counts against the preemption budget only. A trainer that exits with
another non-zero code (error, OOM, bad user code) is `FAILED`; the "invalid spec" exit
code is `INVALID_SPEC` (retrying will not help). A `FAILED` trainer that ran out of
memory (reason OOMKilled, or a SIGKILL exit on a pod nobody deleted or disrupted) is
marked `out_of_memory`: the decision treats it as the running trial's end when the
trial is known (docs/design/operator.md, "Disruption is not failure")."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import tuneop_contract as contract

from ..api import names, queue
from ..api import status as st

Obj = dict[str, Any]

DISRUPTION_REASONS = (
    "PreemptionByScheduler",
    "PreemptionByKubeScheduler",  # the name before Kubernetes 1.27
    "EvictionByEvictionAPI",
    "DeletionByTaintManager",
    "DeletionByPodGC",
    "TerminationByKubelet",
)


ADMISSION_REASONS = (
    "UnexpectedAdmissionError",  # a device plugin (GPU) could not allocate
    "NodeAffinity",
    "NodeSelectorMismatching",
    "InvalidNodeInfo",
    "PodOSNotSupported",
    "PodOSSelectorNodeLabelDoesNotMatch",
)
"""Pod reasons of a kubelet that refused to admit the pod (plus `OutOf<resource>`):
the trainer never ran, so it is a disruption, not the trainer's failure."""

STUCK_WAITING_REASONS = (
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
)
"""Container waiting reasons that do not resolve by waiting a few seconds: a wrong image
or pull secret, a missing ConfigMap/Secret key, a runtime refusing the container."""

UNSCHEDULABLE = "Unschedulable"
TERMINATING_ON_UNREACHABLE_NODE = "TerminatingOnUnreachableNode"

TRAINER_PREEMPTED = "TrainerPreempted"
"""Reason of a trainer that exited with the contract's "preempted" code."""
VOLUME_ERROR = "CheckpointVolumeError"
"""Reason of a trainer that exited 75 because the checkpoint volume refused a write
(full, over quota, read-only): its message says so (contract.is_volume_error)."""
TRAINER_EXITS = (TRAINER_PREEMPTED, VOLUME_ERROR)
"""Reasons of a trainer that stopped itself with exit 75 (not disrupted from outside)."""

SIGKILL_EXIT = 137
"""128 + SIGKILL: on a pod nobody deleted or disrupted, the kernel's out-of-memory killer
(a process other than the container's first one killed for the cgroup's limit leaves
reason Error, not OOMKilled)."""

SIGNAL_EXIT = 128
"""Exit codes above this are a signal's (137 SIGKILL, 143 SIGTERM): the container was
killed, which on a pod being deleted is the deletion, not the trainer's failure."""

OOM_HINT = (
    "the trial ran out of memory (OOMKilled): raise spec.resources.limits.memory (and "
    "requests.memory), or narrow the hyperparameter ranges or batch size that make the "
    "model this large"
)


def admission_rejected(pod: Obj) -> str | None:
    """The kubelet's reason for refusing the pod, if it did (never started the trainer)."""
    reason = str((pod.get("status") or {}).get("reason") or "")
    if reason in ADMISSION_REASONS or reason.startswith("OutOf"):
        return reason
    return None


class Outcome(enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    TERMINATING = "Terminating"
    """Being deleted but not gone yet: wait (its trainer is writing a checkpoint)."""
    COMPLETED = "Completed"
    PREEMPTED = "Preempted"
    FAILED = "Failed"
    INVALID_SPEC = "InvalidSpec"


@dataclasses.dataclass(frozen=True)
class Classification:
    outcome: Outcome
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    out_of_memory: bool = False
    """FAILED because the trainer ran out of memory (OOMKilled, or exit 137 unexplained)."""

    @property
    def ended(self) -> bool:
        return self.outcome in (
            Outcome.COMPLETED,
            Outcome.PREEMPTED,
            Outcome.FAILED,
            Outcome.INVALID_SPEC,
        )


def disruption_reason(pod: Obj) -> str | None:
    """The reason of a True `DisruptionTarget` condition, if any; `EvictedByKueue` for a
    pod Kueue evicted (it marks `TerminationTarget`, not DisruptionTarget)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason") or "DisruptionTarget")
    if queue.eviction(pod) is not None:
        return queue.EVICTED_BY_KUEUE
    return None


def trainer_termination(pod: Obj) -> Obj | None:
    """`state.terminated` (or, failing that, `lastState.terminated`) of the trainer."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != names.TRAINER_CONTAINER:
            continue
        for key in ("state", "lastState"):
            terminated = (status.get(key) or {}).get("terminated")
            if terminated:
                return dict(terminated)
    return None


def trainer_started_at(pod: Obj) -> str | None:
    """When the trainer container started running (`state.running.startedAt`), if it is."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == names.TRAINER_CONTAINER:
            started = ((status.get("state") or {}).get("running") or {}).get("startedAt")
            return str(started) if started else None
    return None


def node_lost(pod: Obj, node: Obj | None, node_known: bool) -> bool:
    """The pod's node is gone from the API, or reports the pod's node as lost."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        return False
    if node_known and node is None:
        return True
    return (pod.get("status") or {}).get("reason") == "NodeLost"


def pending_reason(pod: Obj) -> tuple[str, str]:
    """Why a pod has not started, with the component's own message: Kueue has not
    admitted it (Queued), a container stuck waiting (image pull, config error; init
    containers first), the scheduler's Unschedulable, else the pod's reason or "Pending"."""
    status = pod.get("status") or {}
    if queue.gated(pod):
        return queue.QUEUED, queue.queued_message(pod, None)
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_WAITING_REASONS:
                message = str(waiting.get("message") or "").strip()
                return str(waiting["reason"]), f"container {container.get('name')}: {message}"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("reason") or UNSCHEDULABLE), str(cond.get("message") or "")
    return str(status.get("reason") or "Pending"), str(status.get("message") or "")


def node_unreachable(node: Obj | None) -> bool:
    """The Node's Ready condition is False or Unknown (its kubelet stopped reporting)."""
    for cond in ((node or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") != "True")
    return False


def deletion_due(pods: list[Obj]) -> str | None:
    """When the first of `pods` was due to be gone (RFC 3339): its deletionTimestamp,
    the deletion plus its grace period, within which a trainer may take its time to
    write its checkpoint."""
    due = [t for p in pods if (t := st.parse_time((p.get("metadata") or {}).get(
        "deletionTimestamp"))) is not None]  # fmt: skip
    return st.rfc3339(min(due)) if due else None


def attempt_of(pod: Obj) -> str | None:
    """The pod group index (`tuneop.io/attempt`) the pod was created for."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(names.LABEL_ATTEMPT)
    return str(value) if value is not None else None


def alive(pod: Obj) -> bool:
    """Not yet being deleted (a delete call would still do something)."""
    return not (pod.get("metadata") or {}).get("deletionTimestamp")


def needs_node(pod: Obj) -> bool:
    """Whether `classify` may consult the pod's Node: the pod is bound and has not
    ended (an ended pod's outcome comes from its own status)."""
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


def classify(pod: Obj, *, node: Obj | None = None, node_known: bool = False) -> Classification:
    """Classify a trainer pod that still exists. `node` is the pod's Node (None with
    `node_known=True` means the node does not exist any more)."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    disruption = disruption_reason(pod)
    term = trainer_termination(pod)
    exit_code = term.get("exitCode") if term else None
    message = str((term or {}).get("message") or status.get("message") or "").strip()

    if phase == "Succeeded" or (phase == "Failed" and exit_code == contract.EXIT_COMPLETED):
        return Classification(Outcome.COMPLETED, "Completed", message, exit_code)
    if phase == "Failed":
        return _classify_failed(pod, term, deleting, message)
    if node_lost(pod, node, node_known):
        return Classification(Outcome.PREEMPTED, "NodeLost", f"node {pod['spec']['nodeName']}")
    if deleting and node is not None and node_unreachable(node):
        # the kubelet that would stop it is gone: nothing happens until the node comes
        # back or is declared lost (the operator never force-deletes: two trainers
        # must not write one checkpoint directory)
        node_name = pod["spec"]["nodeName"]
        return Classification(
            Outcome.TERMINATING,
            TERMINATING_ON_UNREACHABLE_NODE,
            f"pod {pod['metadata']['name']} is terminating on node {node_name}, which is not "
            "ready; if the node is gone for good, mark it: kubectl taint nodes "
            f"{node_name} node.kubernetes.io/out-of-service=nodeshutdown:NoExecute "
            "(or delete the Node)",
        )
    if deleting:
        return Classification(Outcome.TERMINATING, disruption or "DeletedExternally")
    if phase == "Running":
        return Classification(Outcome.RUNNING, "Running")
    if phase == "Unknown":
        return Classification(Outcome.RUNNING, "Unknown")
    reason, why = pending_reason(pod)
    return Classification(Outcome.PENDING, reason, why or message)


def _classify_failed(pod: Obj, term: Obj | None, deleting: bool, message: str) -> Classification:
    """A Failed pod: who ended it? The trainer's own exit code is read before the
    pod's deletion: a trainer that crashed or ran out of memory failed, even if the
    pod was deleted afterwards; a signal's exit on a pod being deleted is the deletion."""
    status = pod.get("status") or {}
    disruption = disruption_reason(pod)
    exit_code = term.get("exitCode") if term else None
    reason = str((term or {}).get("reason") or "Error")
    if disruption == queue.EVICTED_BY_KUEUE:
        why = queue.eviction(pod) or ""
        return Classification(Outcome.PREEMPTED, disruption, why, exit_code)
    if disruption:
        return Classification(Outcome.PREEMPTED, disruption, message, exit_code)
    if exit_code == contract.EXIT_PREEMPTED:
        reason = VOLUME_ERROR if contract.is_volume_error(message) else TRAINER_PREEMPTED
        return Classification(Outcome.PREEMPTED, reason, message, exit_code)
    if status.get("reason") in ("Evicted", "Shutdown", "NodeShutdown", "Terminated"):
        return Classification(
            Outcome.PREEMPTED, "TerminationByKubelet", message or status["reason"], exit_code
        )
    if status.get("reason") == "NodeLost":
        return Classification(Outcome.PREEMPTED, "NodeLost", message, exit_code)
    rejected = admission_rejected(pod) if term is None else None
    if rejected:
        return Classification(
            Outcome.PREEMPTED, "AdmissionRejected", f"{rejected}: {message}".strip(": "), None
        )
    if exit_code == contract.EXIT_INVALID_SPEC:
        return Classification(Outcome.INVALID_SPEC, "InvalidSpec", message, exit_code)
    if reason == "OOMKilled":
        text = f"{OOM_HINT}; {message}" if message else OOM_HINT
        return Classification(Outcome.FAILED, reason, text, exit_code, out_of_memory=True)
    if deleting and (exit_code is None or exit_code > SIGNAL_EXIT):
        return Classification(Outcome.PREEMPTED, "DeletedExternally", message, exit_code)
    if exit_code == SIGKILL_EXIT:
        text = f"killed by SIGKILL (exit 137), most likely out of memory: {OOM_HINT}"
        return Classification(
            Outcome.FAILED, reason, f"{text}; {message}" if message else text, exit_code, True
        )
    init = failed_init_container(pod) if term is None else None
    if init:  # the trainer never ran: say which init container (spec.template) failed
        return Classification(Outcome.FAILED, reason, message or init, exit_code)
    return Classification(
        Outcome.FAILED,
        reason,
        message or f"trainer exited with code {exit_code}",
        exit_code,
    )


def failed_init_container(pod: Obj) -> str:
    """ "init container <name> exited with code N[: message]" for the first init
    container (spec.template.spec.initContainers) that ended non-zero, else ""."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        term = (status.get("state") or {}).get("terminated") or {}
        if term and term.get("exitCode") not in (None, 0):
            text = f"init container {status.get('name')} exited with code {term['exitCode']}"
            detail = str(term.get("message") or term.get("reason") or "").strip()
            return f"{text}: {detail}" if detail else text
    return ""


def classify_missing(last_seen: Obj | None) -> Classification:
    """A pod of the running group vanished from the API. The operator never deletes a
    pod of the current group without first moving to a new group, so someone else did:
    the scheduler, the Eviction API, the taint manager, a person. The last version seen
    (if the watch caught one) may say who."""
    if last_seen is not None:
        seen = classify(last_seen)
        if seen.outcome in (Outcome.COMPLETED, Outcome.FAILED, Outcome.INVALID_SPEC):
            return seen
        reason = disruption_reason(last_seen)
        if reason:
            return Classification(Outcome.PREEMPTED, reason, "pod deleted", seen.exit_code)
        if seen.outcome == Outcome.PREEMPTED:
            return seen
    return Classification(Outcome.PREEMPTED, "DeletedExternally", "pod deleted")
