"""Process-wide state shared by the kopf handlers: the config, the API layer, one wake-up
event per job (pod events wake the job's reconcile loop early) and the last version of
each pod the watch delivered (it tells why a pod that vanished went)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import threading
import time
from typing import Any

from ..act import executor
from ..act import kube as kube_mod
from ..api import names, podtemplate, queue
from ..api.spec import JobSpec
from ..decide.patch import Decision, Refusal
from ..decide.reconcile import decide, nodes_to_read
from . import metrics
from .config import Config

Obj = dict[str, Any]
Key = tuple[str, str]

log = logging.getLogger(__name__)
Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]

FINISHED_RECHECK_SECONDS = 600.0
"""A finished job, or a suspended one with no pod left, is re-read this rarely (a
level-based safety net); its spec changes, its pods' events and its TTL wake it sooner."""

NODE_CACHE_SECONDS = 5.0


class Runtime:
    def __init__(self, config: Config, kube: kube_mod.Kube) -> None:
        self.config = config
        self.kube = kube
        self._lock = threading.Lock()
        self._triggers: dict[Key, asyncio.Event] = {}
        self._seen: dict[Key, dict[str, Obj]] = {}
        self._ignored: dict[Key, tuple[str, ...]] = {}
        self._nodes: dict[str, tuple[float, Obj | None]] = {}
        self.fence_task: asyncio.Task[None] | None = None

    def node(self, name: str) -> Obj | None:
        """The Node `name` as read at most NODE_CACHE_SECONDS ago: one read serves every
        job with pods on that node, so node reads grow with nodes, not with jobs or
        passes. Node loss is seen that much later, next to the node lifecycle
        controller's own 40 s before it marks a node NotReady."""
        now = time.monotonic()
        with self._lock:
            cached = self._nodes.get(name)
        if cached is not None and now - cached[0] < NODE_CACHE_SECONDS:
            return cached[1]
        node = self.kube.get_node(name)
        with self._lock:
            fresh = {n: v for n, v in self._nodes.items() if now - v[0] < NODE_CACHE_SECONDS}
            fresh[name] = (now, node)
            self._nodes = fresh
        return node

    def trigger(self, key: Key) -> asyncio.Event:
        with self._lock:
            return self._triggers.setdefault(key, asyncio.Event())

    def pod_seen(self, namespace: str, job: str, pod: Obj) -> None:
        with self._lock:
            self._seen.setdefault((namespace, job), {})[pod["metadata"]["name"]] = pod
            event = self._triggers.get((namespace, job))
        if event is not None:
            event.set()

    def last_seen(self, key: Key) -> dict[str, Obj]:
        with self._lock:
            return dict(self._seen.get(key) or {})

    def forget(self, key: Key) -> None:
        with self._lock:
            self._seen.pop(key, None)
            self._triggers.pop(key, None)
            self._ignored.pop(key, None)
        metrics.JOBS.forget(*key)

    def reconcile_once(
        self,
        namespace: str,
        name: str,
        logger: Logger,
    ) -> float | None:
        """One level-based pass: read the job, its pods (and the nodes their
        classification needs), its progress ConfigMap and the user's script ConfigMap;
        decide; apply. Returns how long the next pass may wait when that is longer than
        the normal interval (a finished job), else None. Its writes ask the fence
        (act.fence) whether the process was frozen since the pass began."""
        fence = self.kube.fence
        if fence is not None:
            fence.begin()
        try:
            return self._reconcile(namespace, name, logger)
        finally:
            if fence is not None:
                fence.end()

    def _reconcile(self, namespace: str, name: str, logger: Logger) -> float | None:
        job = self.kube.get_job(namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return None
        # what the job leaves unset comes from the cluster-wide trainer defaults
        job = podtemplate.with_defaults(job, self.config.trainer_defaults)
        spec = JobSpec.from_dict(job.get("spec") or {})  # once per pass, passed down
        pods = self.kube.list_pods(namespace, name)
        nodes = {node: self.node(node) for node in nodes_to_read(job, pods, spec)}
        read = self._read_objects(namespace, name, spec, pods)

        def decide_pass(refused: Refusal | None = None) -> Decision:
            return decide(
                job,
                pods,
                spec=spec,
                now=dt.datetime.now(dt.UTC),
                nodes=nodes,
                last_seen=self.last_seen((namespace, name)),
                configmaps=read.configmaps,
                progress_configmap=read.progress,
                claim=read.claim,
                workloads=read.workloads,
                refused=refused,
            )

        decision = executor.apply_pass(
            self.kube,
            job,
            decide_pass,
            metrics_port=self.config.trainer_metrics_port,
            uid=self.config.trainer_uid,
            logger=logger,
            spec=spec,
        )
        self._log_ignored((namespace, name), decision.ignored, logger)
        metrics.JOBS.observe(namespace, name, job.get("spec") or {}, decision.merged_status(job))
        for reason, seconds in decision.recoveries:
            metrics.JOBS.recovered(reason, seconds)
        return _rest(decision, spec, pods)

    def _read_objects(self, namespace: str, name: str, spec: JobSpec, pods: list[Obj]) -> _Read:
        """What else the decision reads: the progress ConfigMap, the user's script
        ConfigMap, the Workloads of Kueue-gated pods, a parallel job's existing claim."""
        progress = self.kube.get_configmap(namespace, names.progress_configmap_name(name))
        configmaps: dict[str, Obj | None] = {}
        if spec.script_configmap:
            configmaps[spec.script_configmap] = self.kube.get_configmap(
                namespace, spec.script_configmap
            )
        workloads: dict[str, Obj | None] = {}
        for pod in pods:
            workload = queue.workload_name(pod) if queue.gated(pod) else None
            if workload and workload not in workloads:
                workloads[workload] = self.kube.get_workload(namespace, workload)
        claim = None
        if spec.parallel and spec.checkpoint.existing_claim:
            claim = self.kube.get(
                f"{kube_mod.collection('PersistentVolumeClaim', namespace)}/"
                f"{spec.checkpoint.existing_claim}"
            )
        return _Read(progress, configmaps, workloads, claim)

    def _log_ignored(
        self,
        key: Key,
        ignored: tuple[str, ...],
        logger: Logger,
    ) -> None:
        """Invalid progress fields, logged when the set changes (not every pass)."""
        with self._lock:
            changed = self._ignored.get(key, ()) != ignored
            self._ignored[key] = ignored
        if changed and ignored:
            logger.warning("ignoring invalid %s (wrong type or out of range)", ", ".join(ignored))


@dataclasses.dataclass(frozen=True)
class _Read:
    """The objects a pass reads besides the job, its pods and their nodes."""

    progress: Obj | None
    configmaps: dict[str, Obj | None]
    workloads: dict[str, Obj | None]
    claim: Obj | None


def _rest(decision: Decision, spec: JobSpec, pods: list[Obj]) -> float | None:
    """How long the next pass may wait when that is longer than the normal interval (a
    finished job, a suspended one with no pod left), else None."""
    if decision.delete_job:
        return None
    if decision.finished:
        return min(FINISHED_RECHECK_SECONDS, decision.requeue_after or FINISHED_RECHECK_SECONDS)
    if spec.suspend and not pods:
        # nothing runs and nothing can change by itself: resuming is a spec change
        # and a new pod an event, both of which wake the loop
        return FINISHED_RECHECK_SECONDS
    return None


def job_of(pod: Obj) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(names.LABEL_JOB)
    return str(value) if value else None
