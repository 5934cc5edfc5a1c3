"""Process-wide state shared by the kopf handlers: the config, the API layer, what the
watches delivered (run.watched: what a steady pass reads instead of the API server),
one wake-up event per job (pod and progress events wake the job's reconcile loop early)
and the last version of each pod the watch delivered (it tells why a pod that vanished
went)."""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import functools
import logging
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tuneop_contract.spec import JobSpec

from ..act import executor
from ..act import kube as kube_mod
from ..api import names, podtemplate, queue
from ..api import status as st
from ..api.spec import job_spec
from ..decide.observed import Observed, Refusal
from ..decide.patch import Decision
from ..decide.reconcile import decide, nodes_to_read
from ..render.trainer_pods import PodSettings
from . import metrics
from .config import Config
from .watched import Snapshot, Watched

Obj = dict[str, Any]
Key = tuple[str, str]

log = logging.getLogger(__name__)
Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]

FINISHED_RECHECK_SECONDS = 600.0
"""A finished job, or a suspended one with no pod left, passes this rarely, from what
the watches hold (run.watched's settle); its spec changes, its pods' events and its TTL
wake it sooner."""


class Runtime:
    def __init__(self, config: Config, kube: kube_mod.Kube, watched: Watched | None = None) -> None:
        self.config = config
        self.kube = kube
        self.watched = watched or Watched(resync_seconds=config.resync_seconds)
        self._lock = threading.Lock()
        self._triggers: dict[Key, asyncio.Event] = {}
        self._seen: dict[Key, dict[str, Obj]] = {}
        self._ignored: dict[Key, tuple[str, ...]] = {}
        self._claims: dict[Key, tuple[float, Obj]] = {}
        self.background: list[asyncio.Task[None]] = []
        """Tasks on kopf's loop for the operator's life (the fence, the heap trimmer)."""
        self.passes = ThreadPoolExecutor(config.pass_threads, thread_name_prefix="tuneop-pass")
        """The passes' own threads (Config.pass_threads): asyncio's default pool has
        min(32, cores + 4), six on two cores, and a pass mostly waits on the API server."""

    async def run_pass(self, namespace: str, name: str, logger: Logger) -> float:
        """`reconcile_once` on the pass threads, in the caller's context (as
        asyncio.to_thread: kopf's per-object logging reads it)."""
        call = functools.partial(
            contextvars.copy_context().run, self.reconcile_once, namespace, name, logger
        )
        return await asyncio.get_running_loop().run_in_executor(self.passes, call)

    def node(self, name: str) -> Obj | None:
        """The Node `name` as the node watch delivered it; one the watch has not named
        within the resync interval is read live (once for every job on it)."""
        fresh, node = self.watched.node(name)
        if fresh:
            return node
        node = self.kube.get_node(name)
        self.watched.node_read(name, node)
        return self.watched.node(name)[1]

    def trigger(self, key: Key) -> asyncio.Event:
        with self._lock:
            return self._triggers.setdefault(key, asyncio.Event())

    def wake(self, key: Key) -> None:
        with self._lock:
            event = self._triggers.get(key)
        if event is not None:
            event.set()

    def pod_seen(self, namespace: str, job: str, pod: Obj, deleted: bool = False) -> None:
        key = (namespace, job)
        self.watched.pod_event(key, pod, deleted)
        if self.watched.gone(key):  # a deleted job's pod, still terminating
            return
        with self._lock:
            self._seen.setdefault(key, {})[pod["metadata"]["name"]] = pod
        self.wake(key)

    def last_seen(self, key: Key) -> dict[str, Obj]:
        with self._lock:
            return dict(self._seen.get(key) or {})

    def forget(self, key: Key) -> None:
        with self._lock:
            self._seen.pop(key, None)
            self._triggers.pop(key, None)
            self._ignored.pop(key, None)
            self._claims.pop(key, None)
        self.watched.forget(key)
        metrics.JOBS.forget(*key)

    def reconcile_once(
        self,
        namespace: str,
        name: str,
        logger: Logger,
    ) -> float:
        """One level-based pass: the job, its pods (and the nodes their classification
        needs) and its progress ConfigMap as the watches delivered them (run.watched;
        read live when the cache cannot be trusted), the user's script ConfigMap when
        the decision asks for it; decide; apply. Returns the seconds until the job's
        next timed pass (`next_pass`; an event of its objects wakes it sooner). Its
        writes ask the fence (act.fence) whether the process was frozen since the pass
        began. A pass that fails leaves the next one reading live."""
        fence = self.kube.fence
        if fence is not None:
            fence.begin()
        try:
            return self._reconcile(namespace, name, logger)
        except BaseException:
            self.watched.invalidate((namespace, name))
            raise
        finally:
            if fence is not None:
                fence.end()

    def _reconcile(self, namespace: str, name: str, logger: Logger) -> float:
        key = (namespace, name)
        view = self.watched.snapshot(key)
        if view is None:
            metrics.JOBS.read_live()
            view = self._read_live(namespace, name)
        if view.job is None or view.job["metadata"].get("deletionTimestamp"):
            return 0.0
        # what the job leaves unset comes from the cluster-wide trainer defaults
        job = podtemplate.with_defaults(view.job, self.config.trainer_defaults)
        spec = job_spec(job)  # once per pass, passed down
        pods = view.pods
        nodes = {node: self.node(node) for node in nodes_to_read(job, pods, spec)}
        script = _ScriptConfigMaps(self.kube, namespace, spec.script_configmap)
        workloads = self._workloads(namespace, pods)
        claim = self._claim(key, spec)

        settings = PodSettings(
            self.config.trainer_metrics_port,
            self.config.trainer_uid,
            self.config.progress_interval_seconds,
        )

        def decide_pass(refused: Refusal | None = None) -> Decision:
            # read now: a pass decided again after a refusal sees the watch's latest
            seen = Observed(
                job=job, spec=spec, pods=pods, now=dt.datetime.now(dt.UTC), nodes=nodes,
                last_seen=self.last_seen(key), scripts=script, progress=view.progress,
                claim=claim, workloads=workloads, refused=refused, settings=settings,
            )  # fmt: skip
            return decide(seen)

        applied = executor.apply_pass(self.kube, job, decide_pass, logger=logger)
        self.watched.applied(key, applied.job, applied.wrote_children)
        decision = applied.decision
        self._log_ignored(key, decision.ignored, logger)
        metrics.JOBS.observe(namespace, name, job.get("spec") or {}, decision.merged_status(job))
        for reason, seconds in decision.recoveries:
            metrics.JOBS.recovered(reason, seconds)
        self.watched.settle(key, resting(decision, spec, pods), view.events)
        return next_pass(decision, spec, pods, self.watched.resync_seconds)

    def _read_live(self, namespace: str, name: str) -> Snapshot:
        """The job, its pods and its progress ConfigMap from the API server, merged into
        what the watches hold (run.watched)."""
        job = self.kube.get_job(namespace, name)
        if job is None:
            return self.watched.read_live((namespace, name), None, [], None, None)
        pods, listed = self.kube.list_pods_at(namespace, name)
        progress = self.kube.get_configmap(namespace, names.progress_configmap_name(name))
        return self.watched.read_live((namespace, name), job, pods, listed, progress)

    def _workloads(self, namespace: str, pods: list[Obj]) -> dict[str, Obj | None]:
        """The Kueue Workloads of the queued (gated) pods: their admission message."""
        workloads: dict[str, Obj | None] = {}
        for pod in pods:
            workload = queue.workload_name(pod) if queue.gated(pod) else None
            if workload and workload not in workloads:
                workloads[workload] = self.kube.get_workload(namespace, workload)
        return workloads

    def _claim(self, key: Key, spec: JobSpec) -> Obj | None:
        """A parallel job's spec.checkpoint.existingClaim (its access modes are checked),
        re-read every resync interval once found: a claim's access modes never change."""
        if not (spec.parallel and spec.checkpoint.existing_claim):
            return None
        now = self.watched.clock()  # the cache's clock: one resync interval for all
        name = spec.checkpoint.existing_claim
        with self._lock:
            cached = self._claims.get(key)
        fresh = cached is not None and now - cached[0] < self.watched.resync_seconds
        if fresh and cached is not None and cached[1]["metadata"].get("name") == name:
            return cached[1]
        claim = self.kube.get(f"{kube_mod.collection('PersistentVolumeClaim', key[0])}/{name}")
        if claim is not None:
            with self._lock:
                self._claims[key] = (now, claim)
        return claim

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


class _ScriptConfigMaps(Mapping[str, Obj | None]):
    """spec.script.configMap as `decide` looks it up: read from the API server on the
    first lookup only (a running job's steady pass never asks), None if it does not
    exist."""

    def __init__(self, kube: kube_mod.Kube, namespace: str, name: str | None) -> None:
        self._kube, self._namespace, self._name = kube, namespace, name
        self._read: dict[str, Obj | None] = {}

    def __getitem__(self, name: str) -> Obj | None:
        if name != self._name:
            raise KeyError(name)
        if name not in self._read:
            self._read[name] = self._kube.get_configmap(self._namespace, name)
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter([self._name] if self._name else [])

    def __len__(self) -> int:
        return 1 if self._name else 0


def next_pass(decision: Decision, spec: JobSpec, pods: list[Obj], resync: float) -> float:
    """Seconds until the job's next timed pass; its objects' events wake it sooner. The
    earliest deadline its rules wait for (Decision.requeue_after), at most
    FINISHED_RECHECK_SECONDS for a finished job or a suspended one with no pod left.
    Else 0 (the loop's floor, reconcile_seconds) after a pass that changed anything
    but the trainer's report (status beyond st.REPORTED, Events, pods or children): a
    job passes until a pass finds nothing to do, as a decision may need the next pass
    to carry on (a group recorded for recreation is created by the following one) and
    no event may come for it. A pass that only copied a progress report has nothing
    to carry on, so a steady job costs one pass per report, not two. Only a settled
    job rests, at most `resync` (the cache's resync, a level-based safety net)."""
    if resting(decision, spec, pods):
        rest = FINISHED_RECHECK_SECONDS
    elif decision.writes_children or decision.events or set(decision.status) - st.REPORTED:
        return 0.0
    else:
        rest = resync
    due = decision.requeue_after
    return rest if due is None else min(rest, due)


def resting(decision: Decision, spec: JobSpec, pods: list[Obj]) -> bool:
    """A finished job, or a suspended one with no pod left: nothing runs and nothing
    changes by itself; resuming is a spec change and a new pod an event, both of which
    wake the loop (and end the rest: run.watched)."""
    return decision.finished or (spec.suspend and not pods)


def job_of(pod: Obj) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(names.LABEL_JOB)
    return str(value) if value else None
