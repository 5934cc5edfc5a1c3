"""Kueue in the chaos soak: the queue objects (a ResourceFlavor, a ClusterQueue of every
GPU of the cluster's nodes preempting lower priorities within itself, a LocalQueue in
each queued job's namespace, as tests/e2e/test_queue.py's `queue_ns` makes them), the
quota changed and restored, Kueue's manager restarted, and a watch of the queued pods
that tells which ones Kueue evicted.

The builders are pure; `Queues` acts through kubectl and the manager the soak was given
(tests/localcluster/kueue.py's Kueue, started as the `kueue` fixture starts it)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any

import tuneop_contract as contract
import urllib3
from kubernetes import client, watch
from tuneop.api import queue as kq

from bench.chaos.jobkinds import LOCAL_QUEUE
from tests.e2e.harness import Env
from tests.localcluster.cluster import wait_for

if TYPE_CHECKING:
    from tests.localcluster.kueue import Kueue

Obj = dict[str, Any]

API = "kueue.x-k8s.io/v1beta2"  # tests/localcluster/kueue.py's API
GPU = "nvidia.com/gpu"
FLAVOR = "chaos-gpus"
CLUSTER_QUEUE = "chaos-cq"
PREEMPTOR_CLASS = "tuneop-chaos-queue-high"
PREEMPTOR_PRIORITY = 1000
"""Above the queued jobs' (they name no PriorityClass: 0). Kueue reads only the value
(GetPriorityFromPriorityClass in pkg/util/priority, v0.17); kube-scheduler honours the
class's preemptionPolicy Never, so a preemptor that fits no node stays Pending instead
of preempting unqueued jobs' pods that Kueue does not count."""
CPU_QUOTA, MEMORY_QUOTA = "1000", "4Ti"
"""Covered so Kueue can admit the trainers' cpu and memory requests; never the bound."""
RESTORE_SECONDS = 420.0
"""How long a quota restore or a preemptor's delete is retried (an API server outage
refuses both, Kueue's manager down the restore; restart_manager retries a start for
300 s): a quota left at 0 or a preemptor left would hold every queued job for the rest
of the soak."""


def flavor() -> Obj:
    """The one ResourceFlavor: no node labels, so any node."""
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}}


def resource_groups(gpus: int) -> list[Obj]:
    """The ClusterQueue's quota: `gpus` GPUs (cpu and memory covered, never short)."""
    return [{
        "coveredResources": ["cpu", "memory", GPU],
        "flavors": [{"name": FLAVOR, "resources": [
            {"name": "cpu", "nominalQuota": CPU_QUOTA},
            {"name": "memory", "nominalQuota": MEMORY_QUOTA},
            {"name": GPU, "nominalQuota": gpus},
        ]}],
    }]  # fmt: skip


def cluster_queue(gpus: int) -> Obj:
    """Every namespace's LocalQueue may point at it; a higher priority preempts lower
    ones within it (test_queue.py's `queue_ns`)."""
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": resource_groups(gpus),
        },
    }


def local_queue(namespace: str) -> Obj:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }


def preemptor_class() -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PREEMPTOR_CLASS},
        "value": PREEMPTOR_PRIORITY,
        "preemptionPolicy": "Never",
        "description": "tuneop chaos soak: preempts lower priorities through Kueue only",
    }


def preemptor_pod(name: str, namespace: str, gpus: int) -> Obj:
    """A queued pod that idles holding `gpus` GPUs at PREEMPTOR_PRIORITY (test_queue.py's
    `holding_pod` of a higher PriorityClass)."""
    limits = {GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {kq.QUEUE_LABEL: LOCAL_QUEUE}},
        "spec": {
            "priorityClassName": PREEMPTOR_CLASS,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "hold", "image": "tuneop/pause", "command": ["sleep", "infinity"],
                "resources": {"requests": limits, "limits": limits},
            }],
        },
    }  # fmt: skip


def reserved_gpus(cq: Obj) -> int:
    """The GPUs the ClusterQueue's admitted workloads hold (its flavorsReservation)."""
    total = 0
    for used in (cq.get("status") or {}).get("flavorsReservation") or []:
        for resource in used.get("resources") or []:
            if resource.get("name") == GPU:
                total += int(str(resource.get("total") or "0"))
    return total


def pod_gpus(pod: Obj) -> int:
    """The GPUs a pod's containers ask for."""
    return sum(
        int(str(((c.get("resources") or {}).get("limits") or {}).get(GPU) or "0"))
        for c in (pod.get("spec") or {}).get("containers") or []
    )


@dataclasses.dataclass
class Queues:
    """The soak's queue objects on a running Kueue: the ClusterQueue's nominal GPU
    quota (`gpus`) and the namespace the preemptors queue in (its own, so nothing of
    theirs is left in a job's namespace when the job is checked)."""

    kueue: Kueue
    gpus: int = 0
    namespace: str = ""
    preemptors: int = 0

    def setup(self, env: Env) -> None:
        """The PriorityClass, flavor and ClusterQueue (GPUs: every node's), and the
        preemptors' namespace with its LocalQueue, once it is active."""
        nodes = env.cluster.core.list_node().items
        self.gpus = sum(int((n.status.allocatable or {}).get(GPU) or 0) for n in nodes)
        env.kubectl.apply(preemptor_class(), flavor(), cluster_queue(self.gpus))
        self.namespace = env.namespace("chaos-kueue")
        self.add_local_queue(env, self.namespace, required=True)

    def add_local_queue(self, env: Env, namespace: str, required: bool = False) -> None:
        """The LocalQueue in `namespace`, once Kueue says it is active (60 s at most).
        Only the setup's is `required`: a job's pods wait for theirs (gated), so a job
        submitted while Kueue's manager restarts goes on, queued until it is back."""
        env.kubectl.apply(local_queue(namespace))
        try:
            wait_for(
                lambda: "True" in env.kubectl(
                    "get", "localqueue", LOCAL_QUEUE, "-n", namespace, "-o",
                    "jsonpath={.status.conditions[?(@.type=='Active')].status}", check=False,
                ).stdout,
                60,
                f"LocalQueue {LOCAL_QUEUE} active in {namespace}",
            )  # fmt: skip
        except TimeoutError:
            if required:
                raise

    def free_gpus(self, env: Env) -> int:
        cq = env.kubectl.json("get", "clusterqueue", CLUSTER_QUEUE)
        return max(0, self.gpus - reserved_gpus(cq))

    def set_quota(self, env: Env, gpus: int, timeout: float = 0.0) -> None:
        """The ClusterQueue's GPU nominalQuota set to `gpus`, retried for `timeout` s
        (Kueue's webhook refuses it while its manager is down)."""
        body = json.dumps({"spec": {"resourceGroups": resource_groups(gpus)}})
        retried(env, timeout, "patch", "clusterqueue", CLUSTER_QUEUE, "--type=merge", "-p", body)

    def create_preemptor(self, env: Env, gpus: int) -> str:
        self.preemptors += 1
        name = f"kueue-preemptor-{self.preemptors}"
        env.kubectl.apply(preemptor_pod(name, self.namespace, gpus))
        return name

    def delete_preemptor(self, env: Env, name: str) -> None:
        """The preemptor deleted, retried through an API server outage for
        RESTORE_SECONDS: left, it would hold the quota for the rest of the soak."""
        retried(env, RESTORE_SECONDS, "delete", "pod", name, "-n", self.namespace,
                 "--wait=false", "--ignore-not-found")  # fmt: skip

    def teardown(self, env: Env) -> None:
        """The preemptors' namespace, the ClusterQueue and the flavor deleted (the jobs'
        LocalQueues go with their namespaces)."""
        kubectl = env.kubectl
        if self.namespace:
            kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)
        kubectl("delete", "clusterqueue", CLUSTER_QUEUE, "--wait=false", check=False)
        kubectl("delete", "resourceflavor", FLAVOR, "--wait=false", check=False)


def retried(env: Env, timeout: float, *args: str) -> None:
    """kubectl `args`, again every 2 s until it succeeds, its object is gone (NotFound:
    nothing left to restore) or `timeout` s pass (then its error is raised)."""
    deadline = time.monotonic() + timeout
    while True:
        result = env.kubectl(*args, check=False)
        gone = "(NotFound)" in result.stderr and '" not found' in result.stderr  # the object
        if result.returncode == 0 or gone:
            return
        if time.monotonic() > deadline:
            env.kubectl(*args)  # raises with kubectl's message
        time.sleep(2)


def restart_manager(kueue: Kueue, down: float, timeout: float = 300.0) -> int:
    """Kueue's manager process stopped, `down` s, started again; returns the starts it
    took. Its webhook configurations stay registered meanwhile, as a real manager's
    restart leaves them (its Service has no endpoint): pod creates and updates are
    refused until it is back. Kueue.stop() would unregister them first, and a queued
    pod created then would run ungated, outside Kueue's quota; so the process alone is
    stopped here (Kueue.stop_manager). A start that fails (an API server outage) is retried for
    `timeout` s; Kueue.start() unregisters the webhooks when it fails, so pods created
    until the next start succeeds do run ungated."""
    kueue.stop_manager()
    time.sleep(down)
    deadline = time.monotonic() + timeout
    starts = 0
    while True:
        starts += 1
        try:
            kueue.start()  # on failure it cleans up after itself (Kueue.stop())
            return starts
        except Exception:  # retried: Kueue down is not a state the soak may end in
            if time.monotonic() > deadline:
                raise
            time.sleep(5)


@dataclasses.dataclass
class Evictions:
    """What a watch of the queued pods saw: the trainer pods Kueue marked for
    termination (by uid, each as first seen marked: whether it was running then and
    nobody else was deleting it), whether the preemptor was admitted (its gate lifted),
    the resourceVersion the watch got to. Any trainer pod counts, not only those listed
    at the start: Kueue evicts the most recently admitted first, a group admitted
    after the listing included."""

    resource_version: str
    victims: dict[str, Obj] = dataclasses.field(default_factory=dict)
    admitted: bool = False
    broken: str = ""

    def note(self, event: Obj, preemptor: tuple[str, str] | None) -> None:
        pod = event["raw_object"]
        meta = pod["metadata"]
        self.resource_version = str(meta.get("resourceVersion") or self.resource_version)
        if (meta.get("namespace"), meta.get("name")) == preemptor:
            self.admitted = self.admitted or (event["type"] != "DELETED" and not kq.gated(pod))
        elif contract.LABEL_JOB in (meta.get("labels") or {}) and kq.eviction(pod) is not None:
            self.victims.setdefault(str(meta["uid"]), pod)


def watch_from(core: client.CoreV1Api) -> Evictions:
    """A watch's start: the resourceVersion of a listing of the queued pods now (each
    status they go through after it is seen)."""
    response = core.list_pod_for_all_namespaces(label_selector=kq.QUEUE_LABEL, limit=1,
                                                _preload_content=False)  # fmt: skip
    return Evictions(str(json.loads(response.data)["metadata"]["resourceVersion"]))


def watch_evictions(
    core: client.CoreV1Api, seen: Evictions, preemptor: tuple[str, str] | None,
    timeout: float, hold: float,
) -> Evictions:  # fmt: skip
    """Follow the queued pods until `preemptor` is admitted and `hold` s more, or until
    `timeout` s pass: Kueue marks its victims (TerminationTarget, then a graceful
    delete: Pod.Stop in its pod controller) before it admits the preemptor, and a
    preemption it issued just before may land just after. Reconnects from the last
    resourceVersion seen (an API server restart); stops when that is too old (410)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = max(1, int(min(10.0, deadline - time.monotonic())))
        try:
            stream = watch.Watch().stream(
                core.list_pod_for_all_namespaces, label_selector=kq.QUEUE_LABEL,
                resource_version=seen.resource_version, timeout_seconds=left,
            )  # fmt: skip
            with contextlib.closing(stream):
                for event in stream:
                    admitted = seen.admitted
                    seen.note(event, preemptor)
                    if seen.admitted and not admitted:
                        deadline = time.monotonic() + hold
                    if time.monotonic() >= deadline:
                        break
        except client.ApiException as err:
            if err.status == 410:
                seen.broken = "the watch's resourceVersion expired"
                return seen
            time.sleep(1)
        except urllib3.exceptions.HTTPError:
            time.sleep(1)
    return seen
