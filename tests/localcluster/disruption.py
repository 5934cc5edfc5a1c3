"""Disruption helpers for tests (test infrastructure).

Each does what the real event does, through the real control plane, so the operator
sees exactly what it would see on a cluster:

- :func:`evict_pod`: the Eviction API (what ``kubectl drain`` and the autoscaler use);
  the API server adds ``DisruptionTarget`` (reason ``EvictionByEvictionAPI``) and
  deletes the pod with its grace period.
- :func:`delete_pod`: a plain delete with a grace period (SIGTERM, wait, SIGKILL).
- :func:`crash_node`: node loss; the agent SIGKILLs its pods' processes and stops its
  heartbeat; after the node-monitor grace period the node lifecycle controller marks
  it NotReady/Unknown and taints it, and the taint-eviction controller deletes the
  pods (``DisruptionTarget`` reason ``DeletionByTaintManager``). Pods stay Terminating
  until the node comes back (:func:`recover_node`) or is deleted (:func:`delete_node`),
  as on a real cluster.
- :func:`preempt_with_priority`: a pod of a higher PriorityClass that needs the GPUs,
  so kube-scheduler preempts (``DisruptionTarget`` reason ``PreemptionByScheduler``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubernetes import client

if TYPE_CHECKING:
    from tests.localcluster.cluster import LocalCluster

HIGH_PRIORITY_CLASS = "tuneop-test-preemptor"
HIGH_PRIORITY = 1_000_000


def evict_pod(
    api: client.ApiClient, namespace: str, name: str, grace_seconds: int | None = None
) -> None:
    """Evict through the Eviction API (policy/v1); raises ApiException 429 if a
    PodDisruptionBudget forbids it."""
    options = None
    if grace_seconds is not None:
        options = client.V1DeleteOptions(grace_period_seconds=grace_seconds)
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        delete_options=options,
    )
    client.CoreV1Api(api).create_namespaced_pod_eviction(
        name, namespace, body, _preload_content=False
    )


def delete_pod(
    api: client.ApiClient, namespace: str, name: str, grace_seconds: int | None = None
) -> None:
    """Delete with a grace period (None: the pod's terminationGracePeriodSeconds)."""
    client.CoreV1Api(api).delete_namespaced_pod(
        name, namespace, grace_period_seconds=grace_seconds, _preload_content=False
    )


def crash_node(cluster: LocalCluster, node: str | None = None) -> str:
    """Lose a node: SIGKILL its pods' processes, stop its Lease/Ready heartbeat and its
    kubelet port. Returns the node name."""
    agent = cluster.node(node)
    agent.crash()
    return agent.name


def recover_node(cluster: LocalCluster, node: str | None = None) -> None:
    """Bring a crashed node back (like a rebooted kubelet): heartbeat resumes, pods
    marked for deletion are removed, others restart per restartPolicy."""
    cluster.node(node).recover()


def delete_node(cluster: LocalCluster, node: str | None = None) -> None:
    """Remove a (crashed) Node object; the pod GC controller then deletes its pods."""
    agent = cluster.node(node)
    client.CoreV1Api(cluster.api).delete_node(agent.name, _preload_content=False)


def ensure_priority_class(
    api: client.ApiClient, name: str = HIGH_PRIORITY_CLASS, value: int = HIGH_PRIORITY
) -> str:
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "tuneop tests: preempts lower-priority pods for their GPUs",
    }
    try:
        client.SchedulingV1Api(api).create_priority_class(body, _preload_content=False)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    return name


def preemptor_pod(
    name: str, gpus: int, priority_class: str, node: str | None = None, cpu: str | None = None
) -> dict[str, Any]:
    """A pod that idles holding ``gpus`` GPUs (and ``cpu``, if given) at a high priority
    (pure)."""
    spec: dict[str, Any] = {
        "priorityClassName": priority_class,
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "preemptor",
                "image": "tuneop/pause",
                "command": ["sleep", "infinity"],
                "resources": {
                    "limits": {"nvidia.com/gpu": str(gpus), **({"cpu": cpu} if cpu else {})}
                },
            }
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "tuneop-preemptor"}},
        "spec": spec,
    }


def preempt_with_priority(
    api: client.ApiClient,
    namespace: str,
    gpus: int,
    name: str = "preemptor",
    node: str | None = None,
    priority_class: str = HIGH_PRIORITY_CLASS,
    priority: int = HIGH_PRIORITY,
    cpu: str | None = None,
) -> str:
    """Create a PriorityClass (if absent) and a pod of it requesting ``gpus`` GPUs (and
    ``cpu``: the whole node's, to preempt pods that hold CPU but no GPU); the real
    scheduler preempts lower-priority pods to fit it. Returns the pod name; delete it to
    give the resources back."""
    ensure_priority_class(api, priority_class, priority)
    body = preemptor_pod(name, gpus, priority_class, node, cpu)
    client.CoreV1Api(api).create_namespaced_pod(namespace, body, _preload_content=False)
    return name
