"""Kueue's plain-pod integration on the local cluster: real Kueue, real scheduler, node agent.

A ClusterQueue with 4 ``nvidia.com/gpu`` (the one node's; only strictly lower priorities
are preempted), a LocalQueue, and pods labelled ``kueue.x-k8s.io/queue-name``:

- gated at creation (``kueue.x-k8s.io/admission``, finalizer and label
  ``kueue.x-k8s.io/managed``), admitted by Kueue (gate removed), run by the node agent;
  a second 4-GPU pod waits gated until the first finishes;
- a pod group (label ``kueue.x-k8s.io/pod-group-name`` + annotation
  ``kueue.x-k8s.io/pod-group-total-count``) gets one Workload named after the group,
  admitted only once all its pods exist, and then all at once.

What an operator running trainer pods as a pod group has to live with (checked here):

- a pod of an admitted group that fails or is deleted stays Terminating, phase Failed,
  with Kueue's finalizer, and the Workload keeps its quota (WaitingForReplacementPods
  True/PodsFailed) until a replacement pod joins the group; the replacement needs a new
  name (the old one is still taken) and is ungated at once; then the old pod is released;
- preemption evicts the whole group: every pod gets condition TerminationTarget
  (reason WorkloadEvictedDueToPreempted) and is deleted, but kept (finalizer); the
  Workload is Evicted/Preempted/Requeued and, when quota is free again, re-admitted with
  no pod alive: it then holds the quota for replacement pods, again under new names;
- deleting a group's pods does not end it: they stay held and the quota stays reserved
  until the group is declared over (annotation ``kueue.x-k8s.io/retriable-in-group:
  "false"`` on a pod) or its Workload is deleted;
- a finished group's name is spent: new pods under it never run (they stay gated on the
  Finished Workload; Kueue deletes those beyond the total count).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.localcluster import kueue as kq
from tests.localcluster.cluster import LocalCluster
from tests.localcluster.kueue import Kueue

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
LOW, HIGH = "kq-low", "kq-high"


# --- pure parts ----------------------------------------------------------------------

MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
- name: mdeployment.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-apps-v1-deployment}
  rules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
- name: mworkload.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system,
              path: /mutate-kueue-x-k8s-io-v1beta2-workload}
  rules: [{apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE],
           resources: [workloads]}]
"""
KUSTOMIZATION = """
patches:
- patch: |-
    kind: MutatingWebhookConfiguration
    webhooks:
    - name: mpod.kb.io
      namespaceSelector: {matchExpressions: [{key: k, operator: NotIn, values: [kube-system]}]}
"""


def test_webhook_configurations_use_urls_and_keep_served_hooks() -> None:
    (config,) = kq.webhook_configurations(MANIFESTS, KUSTOMIZATION, "https://127.0.0.1:9", b"CA")
    assert config["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    hooks = {h["name"]: h for h in config["webhooks"]}
    assert sorted(hooks) == ["mpod.kb.io", "mworkload.kb.io"]  # no Deployment webhook
    assert hooks["mpod.kb.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:9/mutate--v1-pod",
        "caBundle": "Q0E=",
    }
    assert hooks["mpod.kb.io"]["namespaceSelector"]["matchExpressions"][0]["key"] == "k"
    assert "namespaceSelector" not in hooks["mworkload.kb.io"]


def test_manager_config_turns_off_cert_management_and_leader_election() -> None:
    config = kq.manager_config(1, 2, 3, Path("/certs"))
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": "/certs"}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:2"
    assert "pod" in config["integrations"]["frameworks"]


# --- on the local cluster ------------------------------------------------------------


@pytest.fixture(scope="module")
def queue(cluster: LocalCluster, kueue: Kueue) -> str:
    """A namespace with LocalQueue ``lq`` → ClusterQueue with the node's 4 GPUs."""
    ns = cluster.create_namespace(f"kq-{uuid.uuid4().hex[:6]}")
    cq = f"cq-{ns}"
    cluster.apply(
        *(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            for name, value in ((LOW, 100), (HIGH, 1000))
        ),
        {"apiVersion": kq.API, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
        {
            "apiVersion": kq.API,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                # Only strictly lower priorities are preempted: pods without a priority
                # class (0) never preempt one another.
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", GPU],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "16"},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                    {"name": GPU, "nominalQuota": 4},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": kq.API,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": ns},
            "spec": {"clusterQueue": cq},
        },
    )
    cluster.wait_for(
        lambda: _condition(_get(cluster, "localqueues", ns, "lq"), "Active") == "True",
        60,
        "LocalQueue lq active",
    )
    return ns


def _get(cluster: LocalCluster, plural: str, ns: str, name: str) -> Obj | None:
    result = cluster.kubectl("get", f"{plural}.kueue.x-k8s.io", "-n", ns, name, "-o", "json",
                             check=False)  # fmt: skip
    return json.loads(result.stdout) if result.returncode == 0 else None


def _condition(obj: Obj | None, type_: str) -> str | None:
    return _conditions(obj).get(type_, (None, None))[0]


def _conditions(obj: Obj | None) -> dict[str, tuple[str, str]]:
    """``{type: (status, reason)}`` of a Kueue object's status."""
    return {
        c["type"]: (str(c["status"]), str(c.get("reason", "")))
        for c in (obj or {}).get("status", {}).get("conditions", [])
    }


def _workloads(cluster: LocalCluster, ns: str) -> list[Obj]:
    out = cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-n", ns, "-o", "json").stdout
    return list(json.loads(out)["items"])


def _gpu_pod(
    name: str, stop_file: Path, gpus: int = 4, group: str | None = None, total: int = 0,
    priority_class: str | None = None,
) -> Obj:  # fmt: skip
    """A queued pod holding ``gpus`` GPUs until ``stop_file`` exists, then exiting 0."""
    labels = {kq.QUEUE_NAME_LABEL: "lq"}
    annotations = {}
    if group:
        labels[kq.POD_GROUP_NAME_LABEL] = group
        annotations[kq.POD_GROUP_TOTAL_COUNT_ANNOTATION] = str(total)
    wait = f"import os,time\nwhile not os.path.exists({str(stop_file)!r}): time.sleep(0.1)"
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            **({"priorityClassName": priority_class} if priority_class else {}),
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "trainer",
                    "image": "tuneop/trainer:test",
                    "command": ["python", "-c", wait],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi", GPU: str(gpus)},
                        "limits": {GPU: str(gpus)},
                    },
                }
            ],
        },
    }


def _gates(pod: client.V1Pod | None) -> list[str]:
    return [g.name for g in (pod.spec.scheduling_gates or [])] if pod else []


def _admitted_and_running(cluster: LocalCluster, ns: str, name: str) -> bool:
    pod = cluster.pod(ns, name)
    return bool(pod and not _gates(pod) and pod.status.phase == "Running")


def _hold(cluster: LocalCluster, seconds: float, check: Any, what: str) -> None:
    """``check()`` stays true for ``seconds`` (polled every 0.2 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what
        time.sleep(0.2)


@pytest.mark.cluster
@pytest.mark.slow
def test_queued_pod_is_gated_then_admitted_and_runs(
    cluster: LocalCluster, queue: str, tmp_path: Path
) -> None:
    ns = queue
    # Owned (controller) by an object Kueue has no integration for, as trainer pods are
    # by their TuningJob: still a plain pod to Kueue.
    owner = cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    pod = _gpu_pod("one", tmp_path / "stop")
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "owner",
            "uid": owner.metadata.uid,
            "controller": True,
        }
    ]
    start = time.monotonic()
    created = cluster.core.create_namespaced_pod(ns, pod)
    assert kq.ADMISSION_GATE in _gates(created), "the webhook gates a queued pod at creation"
    assert kq.MANAGED_FINALIZER in (created.metadata.finalizers or [])
    assert created.metadata.labels.get("kueue.x-k8s.io/managed") == "true"
    cluster.wait_for(lambda: not _gates(cluster.pod(ns, "one")), 60, "gate removed")
    ungated = time.monotonic() - start
    cluster.wait_for(lambda: _admitted_and_running(cluster, ns, "one"), 60, "one running")
    running = time.monotonic() - start
    (wl,) = _workloads(cluster, ns)
    assert _condition(wl, "Admitted") == "True"
    print(f"kueue admission: create → ungated {ungated:.2f}s, → running {running:.2f}s")

    (tmp_path / "stop").touch()
    cluster.wait_for_pod_phase(ns, "one", "Succeeded", timeout=60)
    cluster.wait_for(
        lambda: _condition(_workloads(cluster, ns)[0], "Finished") == "True", 60, "finished"
    )
    cluster.wait_for(
        lambda: not (cluster.pod(ns, "one").metadata.finalizers or []), 60, "finalizer removed"
    )
    cluster.core.delete_namespaced_pod("one", ns)
    cluster.wait_for_pod_gone(ns, "one")


@pytest.mark.cluster
@pytest.mark.slow
def test_second_pod_waits_gated_until_the_first_finishes(
    cluster: LocalCluster, queue: str, tmp_path: Path
) -> None:
    ns = queue
    cluster.core.create_namespaced_pod(ns, _gpu_pod("first", tmp_path / "stop-first"))
    cluster.wait_for(lambda: _admitted_and_running(cluster, ns, "first"), 60, "first running")
    cluster.core.create_namespaced_pod(ns, _gpu_pod("second", tmp_path / "stop-second"))

    def second_waits() -> bool:
        pod = cluster.pod(ns, "second")
        wl = [w for w in _workloads(cluster, ns) if _owned_by(w, "second")]
        return (
            kq.ADMISSION_GATE in _gates(pod)
            and pod is not None
            and pod.status.phase == "Pending"
            and all(_condition(w, "QuotaReserved") != "True" for w in wl)
        )

    _hold(cluster, 5.0, second_waits, "second pod admitted while the first holds the GPUs")
    (second_wl,) = [w for w in _workloads(cluster, ns) if _owned_by(w, "second")]
    assert _condition(second_wl, "Admitted") != "True"

    (tmp_path / "stop-first").touch()
    finished = time.monotonic()
    cluster.wait_for(lambda: _admitted_and_running(cluster, ns, "second"), 60, "second running")
    print(f"kueue: first Succeeded → second running {time.monotonic() - finished:.2f}s")
    (tmp_path / "stop-second").touch()
    cluster.wait_for_pod_phase(ns, "second", "Succeeded", timeout=60)
    _cleanup(cluster, ns, "first", "second")


@pytest.mark.cluster
@pytest.mark.slow
def test_pod_group_is_admitted_whole(cluster: LocalCluster, queue: str, tmp_path: Path) -> None:
    ns = queue
    stop = tmp_path / "stop"
    cluster.core.create_namespaced_pod(ns, _gpu_pod("g-0", stop, gpus=2, group="g", total=2))

    def g0_alone_waits() -> bool:
        pod = cluster.pod(ns, "g-0")
        group = [w for w in _workloads(cluster, ns) if _owned_by(w, "g-0")]
        return kq.ADMISSION_GATE in _gates(pod) and not any(
            _condition(w, "QuotaReserved") == "True" for w in group
        )

    _hold(cluster, 5.0, g0_alone_waits, "one pod of a group of two was admitted")
    start = time.monotonic()
    cluster.core.create_namespaced_pod(ns, _gpu_pod("g-1", stop, gpus=2, group="g", total=2))
    cluster.wait_for(
        lambda: all(_admitted_and_running(cluster, ns, n) for n in ("g-0", "g-1")),
        60,
        "both pods of the group running",
    )
    print(f"kueue: group complete → both running {time.monotonic() - start:.2f}s")
    (wl,) = [w for w in _workloads(cluster, ns) if _owned_by(w, "g-0")]
    assert _owned_by(wl, "g-1"), "one Workload for the whole group"
    assert _condition(wl, "Admitted") == "True"
    assert sum(ps["count"] for ps in wl["spec"]["podSets"]) == 2
    stop.touch()
    for name in ("g-0", "g-1"):
        cluster.wait_for_pod_phase(ns, name, "Succeeded", timeout=60)
    _cleanup(cluster, ns, "g-0", "g-1")


def _owned_by(workload: Obj, pod: str) -> bool:
    return any(ref["name"] == pod for ref in workload["metadata"].get("ownerReferences", []))


def _cleanup(cluster: LocalCluster, ns: str, *pods: str) -> None:
    for name in pods:
        cluster.core.delete_namespaced_pod(name, ns)
    for name in pods:
        cluster.wait_for_pod_gone(ns, name)


# --- pod groups: what the operator has to live with (replacement, preemption, ending) ---


def _group_workload(cluster: LocalCluster, ns: str, group: str) -> Obj | None:
    # A pod group's Workload is named after the group (kueue.x-k8s.io/workload annotation).
    return _get(cluster, "workloads", ns, group)


def _start_group(
    cluster: LocalCluster, ns: str, group: str, names: list[str], stop: Path, **kw: Any
) -> None:
    for name in names:
        cluster.core.create_namespaced_pod(
            ns, _gpu_pod(name, stop, gpus=4 // len(names), group=group, total=len(names), **kw)
        )
    cluster.wait_for(
        lambda: all(_admitted_and_running(cluster, ns, n) for n in names), 60, f"{group} running"
    )


def _terminating_with_finalizer(cluster: LocalCluster, ns: str, name: str) -> bool:
    pod = cluster.pod(ns, name)
    return bool(
        pod
        and pod.metadata.deletion_timestamp
        and pod.status.phase == "Failed"
        and kq.MANAGED_FINALIZER in (pod.metadata.finalizers or [])
    )


def _end_group(cluster: LocalCluster, ns: str, group: str) -> None:
    """Deleting the group's Workload makes Kueue delete and finalize all its pods."""
    cluster.kubectl("delete", "workloads.kueue.x-k8s.io", "-n", ns, group, "--wait=false")
    cluster.wait_for(
        lambda: not [
            p for p in cluster.core.list_namespaced_pod(ns).items
            if (p.metadata.labels or {}).get(kq.POD_GROUP_NAME_LABEL) == group
        ],
        60,
        f"pods of {group} gone",
    )  # fmt: skip


@pytest.mark.cluster
@pytest.mark.slow
def test_failed_pod_of_an_admitted_group_waits_for_a_replacement_under_a_new_name(
    cluster: LocalCluster, queue: str, tmp_path: Path
) -> None:
    ns, stop = queue, tmp_path / "stop"
    _start_group(cluster, ns, "rg", ["rg-0", "rg-1"], stop)
    cluster.core.delete_namespaced_pod("rg-1", ns)  # e.g. its node went away

    # Kueue keeps the Failed pod (finalizer) and the quota until a replacement comes.
    cluster.wait_for(lambda: _terminating_with_finalizer(cluster, ns, "rg-1"), 30, "rg-1 held")
    conds = _conditions(_group_workload(cluster, ns, "rg"))
    assert conds["Admitted"][0] == "True"
    assert conds["WaitingForReplacementPods"] == ("True", "PodsFailed")
    assert _admitted_and_running(cluster, ns, "rg-0"), "the rest of the group keeps running"
    with pytest.raises(client.ApiException) as err:  # the old name is still taken
        cluster.core.create_namespaced_pod(ns, _gpu_pod("rg-1", stop, 2, "rg", 2))
    assert err.value.status == 409

    start = time.monotonic()
    cluster.core.create_namespaced_pod(ns, _gpu_pod("rg-1-b", stop, 2, "rg", 2))
    cluster.wait_for(lambda: _admitted_and_running(cluster, ns, "rg-1-b"), 60, "replacement")
    print(f"kueue: replacement in an admitted group → running {time.monotonic() - start:.2f}s")
    cluster.wait_for_pod_gone(ns, "rg-1")  # finalized once replaced
    assert _conditions(_group_workload(cluster, ns, "rg"))["WaitingForReplacementPods"][0] == (
        "False"
    )
    _end_group(cluster, ns, "rg")


@pytest.mark.cluster
@pytest.mark.slow
def test_preempted_group_is_evicted_whole_and_readmitted_for_replacements(
    cluster: LocalCluster, queue: str, tmp_path: Path
) -> None:
    ns, stop = queue, tmp_path / "stop"
    _start_group(cluster, ns, "pg", ["pg-0", "pg-1"], stop, priority_class=LOW)
    cluster.core.create_namespaced_pod(ns, _gpu_pod("urgent", tmp_path / "stop-u", 4,
                                                    priority_class=HIGH))  # fmt: skip

    for name in ("pg-0", "pg-1"):
        cluster.wait_for(lambda n=name: _terminating_with_finalizer(cluster, ns, n), 30, name)
        pod = cluster.pod(ns, name)
        assert pod is not None
        (target,) = [c for c in pod.status.conditions if c.type == "TerminationTarget"]
        assert (target.status, target.reason) == ("True", "WorkloadEvictedDueToPreempted")
    conds = _conditions(_group_workload(cluster, ns, "pg"))
    assert conds["Evicted"] == ("True", "Preempted")
    assert conds["Preempted"] == ("True", "InClusterQueue")
    assert conds["Requeued"] == ("True", "Preempted")
    assert conds["QuotaReserved"][0] == "False"
    cluster.wait_for(lambda: _admitted_and_running(cluster, ns, "urgent"), 60, "urgent runs")

    # When the quota is free again the group's Workload is admitted again, with no pod
    # alive: it holds the quota for replacements, which are ungated at once.
    (tmp_path / "stop-u").touch()
    cluster.wait_for(
        lambda: _condition(_group_workload(cluster, ns, "pg"), "Admitted") == "True",
        60,
        "group re-admitted",
    )
    assert _terminating_with_finalizer(cluster, ns, "pg-0"), "old pods stay until replaced"
    start = time.monotonic()
    for name in ("pg-0-b", "pg-1-b"):
        cluster.core.create_namespaced_pod(ns, _gpu_pod(name, stop, 2, "pg", 2, LOW))
    cluster.wait_for(
        lambda: all(_admitted_and_running(cluster, ns, n) for n in ("pg-0-b", "pg-1-b")),
        60,
        "replacements running",
    )
    print(f"kueue: replacements of a re-admitted group → running {time.monotonic() - start:.2f}s")
    for name in ("pg-0", "pg-1"):
        cluster.wait_for_pod_gone(ns, name)
    _end_group(cluster, ns, "pg")
    cluster.core.delete_namespaced_pod("urgent", ns)
    cluster.wait_for_pod_gone(ns, "urgent")


@pytest.mark.cluster
@pytest.mark.slow
def test_deleting_a_groups_pods_holds_quota_until_the_group_is_declared_over(
    cluster: LocalCluster, queue: str, tmp_path: Path
) -> None:
    ns, stop = queue, tmp_path / "stop"
    _start_group(cluster, ns, "eg", ["eg-0", "eg-1"], stop)
    cluster.core.delete_collection_namespaced_pod(
        ns, label_selector=f"{kq.POD_GROUP_NAME_LABEL}=eg"
    )

    def held() -> bool:
        return (
            all(_terminating_with_finalizer(cluster, ns, n) for n in ("eg-0", "eg-1"))
            and _condition(_group_workload(cluster, ns, "eg"), "QuotaReserved") == "True"
        )

    cluster.wait_for(held, 30, "the deleted pods Failed and held")
    _hold(cluster, 5.0, held, "pods of a deleted group released (expected: held, quota kept)")
    # Declaring the group failed: Kueue finishes the Workload and drops the finalizers.
    start = time.monotonic()
    cluster.kubectl("annotate", "pod", "-n", ns, "eg-0", "kueue.x-k8s.io/retriable-in-group=false")
    for name in ("eg-0", "eg-1"):
        cluster.wait_for_pod_gone(ns, name)
    print(f"kueue: retriable-in-group=false → group's pods gone {time.monotonic() - start:.2f}s")


@pytest.mark.cluster
@pytest.mark.slow
def test_a_finished_groups_name_is_not_reused(
    cluster: LocalCluster, queue: str, tmp_path: Path
) -> None:
    ns, stop = queue, tmp_path / "stop"
    _start_group(cluster, ns, "fg", ["fg-0", "fg-1"], stop)
    stop.touch()
    cluster.wait_for(
        lambda: _condition(_group_workload(cluster, ns, "fg"), "Finished") == "True",
        60,
        "fg finished",
    )
    # New pods under the finished group's name never run: they join the Finished Workload
    # and stay gated, and Kueue deletes those beyond the group's total count (the
    # finished pods still count) - sometimes within the 5 s watched here, sometimes not.
    again = tmp_path / "stop-again"
    for name in ("fg-0-b", "fg-1-b"):
        cluster.core.create_namespaced_pod(ns, _gpu_pod(name, again, 2, "fg", 2))

    def never_run() -> bool:
        pods = [cluster.pod(ns, n) for n in ("fg-0-b", "fg-1-b")]
        return all(p is None or kq.ADMISSION_GATE in _gates(p) for p in pods)

    _hold(cluster, 5.0, never_run, "a pod under a finished group's name ran")
    left = {n: _gates(cluster.pod(ns, n)) for n in ("fg-0-b", "fg-1-b") if cluster.pod(ns, n)}
    print(f"kueue: pods under a finished group's name after 5 s: {left}")
    again.touch()
    cluster.core.delete_collection_namespaced_pod(
        ns, label_selector=f"{kq.POD_GROUP_NAME_LABEL}=fg"
    )
    for name in ("fg-0", "fg-1", "fg-0-b", "fg-1-b"):
        cluster.wait_for_pod_gone(ns, name)
