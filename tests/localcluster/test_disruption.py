"""Disruption helpers against the real control plane: the conditions the operator reads."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.localcluster import disruption
from tests.localcluster.cluster import LocalCluster
from tests.localcluster.nodeagent.agent import NodeConfig
from tests.localcluster.python_pods import PY_SLEEP, create, python_pod, watch_until_deleted


def test_preemptor_pod_requests_the_gpus() -> None:
    pod = disruption.preemptor_pod("p", 4, "high", node="gpu-node-0")
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert pod["spec"]["priorityClassName"] == "high"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-0"}


def disruption_target(pod: dict[str, Any]) -> dict[str, Any] | None:
    for cond in pod["status"].get("conditions") or []:
        if cond["type"] == "DisruptionTarget":
            return dict(cond)
    return None


def start_and_watch(cluster: LocalCluster, ns: str, name: str) -> tuple[threading.Thread, dict]:
    """Wait until the pod's process runs, then watch it until it is deleted."""
    cluster.wait_for_log(ns, name, "started", 60)
    rv = cluster.core.read_namespaced_pod(name, ns).metadata.resource_version
    final: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: final.update(watch_until_deleted(cluster, ns, name, rv)), daemon=True
    )
    thread.start()
    return thread, final


@pytest.mark.cluster
def test_eviction_marks_disruption_target(cluster: LocalCluster) -> None:
    ns = cluster.create_namespace("disrupt-evict")
    create(cluster, ns, python_pod("victim", PY_SLEEP, terminationGracePeriodSeconds=5))
    thread, final = start_and_watch(cluster, ns, "victim")
    disruption.evict_pod(cluster.api, ns, "victim")
    thread.join(90)
    cond = disruption_target(final)
    assert cond is not None and cond["status"] == "True"
    assert cond["reason"] == "EvictionByEvictionAPI"
    assert final["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143


@pytest.mark.cluster
def test_scheduler_preempts_for_a_higher_priority_gpu_pod(cluster: LocalCluster) -> None:
    # A node of its own, so GPUs held by other tests' pods cannot interfere.
    cluster.add_node(NodeConfig(name="preempt-node", gpus=2))
    ns = cluster.create_namespace("disrupt-preempt")
    victim = python_pod(
        "low",
        PY_SLEEP,
        terminationGracePeriodSeconds=5,
        nodeSelector={"kubernetes.io/hostname": "preempt-node"},
        container={"resources": {"limits": {"nvidia.com/gpu": "2"}}},
    )
    create(cluster, ns, victim)
    thread, final = start_and_watch(cluster, ns, "low")
    name = disruption.preempt_with_priority(cluster.api, ns, gpus=2, node="preempt-node")
    thread.join(120)
    cond = disruption_target(final)
    assert cond is not None and cond["reason"] == "PreemptionByScheduler", final["status"]
    preemptor = cluster.wait_for_pod_running(ns, name, timeout=90)
    assert preemptor.spec.node_name == "preempt-node"
    disruption.delete_pod(cluster.api, ns, name, grace_seconds=0)
    cluster.wait_for_pod_gone(ns, name)
    cluster.remove_node("preempt-node")


@pytest.mark.cluster
@pytest.mark.slow
def test_crashed_node_goes_not_ready_and_its_pods_are_evicted(cluster: LocalCluster) -> None:
    agent = cluster.add_node(NodeConfig(name="crash-node", gpus=1))
    ns = cluster.create_namespace("disrupt-crash")
    body = python_pod("doomed", PY_SLEEP, nodeSelector={"kubernetes.io/hostname": "crash-node"})
    create(cluster, ns, body)
    cluster.wait_for_log(ns, "doomed", "started", 60)
    assert agent.live_processes()
    disruption.crash_node(cluster, "crash-node")
    assert agent.live_processes() == []

    def evicted() -> Any:
        pod = cluster.pod(ns, "doomed")
        if pod is None or pod.metadata.deletion_timestamp is None:
            return None
        return next((c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"), None)

    cond = cluster.wait_for(evicted, 120, "taint-based eviction of the crashed node's pod")
    assert cond.reason == "DeletionByTaintManager"
    node = cluster.core.read_node("crash-node")
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "Unknown"
    # The node comes back: its kubelet finishes the deletion, as a real one would.
    disruption.recover_node(cluster, "crash-node")
    cluster.wait_for_pod_gone(ns, "doomed", timeout=60)
    cluster.remove_node("crash-node")


@pytest.mark.cluster
@pytest.mark.slow
def test_a_crashed_node_rebooting_while_the_api_server_is_down_comes_back(
    cluster: LocalCluster,
) -> None:
    """A node's reboot may meet an API server outage (the chaos soak's node crash beside
    its API server restart): like a kubelet, it retries its registration until the
    server answers, and is Ready again, instead of staying down for good."""
    cluster.add_node(NodeConfig(name="reboot-node", gpus=1))
    try:
        disruption.crash_node(cluster, "reboot-node")
        cluster.control_plane.kill_apiserver()
        recovering = threading.Thread(target=disruption.recover_node,
                                      args=(cluster, "reboot-node"))  # fmt: skip
        recovering.start()
        recovering.join(6)
        assert recovering.is_alive()  # still retrying: the server is down
        cluster.control_plane.start_apiserver()
        recovering.join(60)
        assert not recovering.is_alive()

        def ready() -> bool:
            node = cluster.core.read_node("reboot-node")
            return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)

        cluster.wait_for(ready, 60, "the rebooted node Ready")
    finally:
        cluster.remove_node("reboot-node")
