"""Thin kopf handlers. The work happens in Runtime.reconcile_once (read, decide, apply),
run by one daemon per TuningJob whenever one of its objects changes (its spec, a pod, its
progress, a node under its pods) and at the earliest deadline its rules wait for, else
rarely as a safety net (run.runtime.next_pass);
kopf provides the watches, the finalizer for cleanup, peering and the liveness probe."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

import kopf
import urllib3

from ..act import executor, kube
from ..act.fence import Frozen
from ..api import names
from ..api import status as st
from . import diffbase, health, heap, metrics, session
from .runtime import Runtime, job_of

RESOURCE = (names.GROUP, names.VERSION, names.PLURAL)
POD_RESOURCE = ("", "v1", "pods")
CONFIGMAP_RESOURCE = ("", "v1", "configmaps")
NODE_RESOURCE = ("", "v1", "nodes")


def _runtime(memo: Any) -> Runtime:
    runtime = getattr(memo, "runtime", None)
    if not isinstance(runtime, Runtime):
        raise kopf.PermanentError("tuneop runtime missing: start with `python -m tuneop`")
    return runtime


log = logging.getLogger(__name__)
"""Retries are logged here, not through kopf's per-object logger: that one turns each
warning into a Kubernetes Event."""


def retry_delay(
    errors: int, interval: float, cap: float, draw: Callable[[], float] = random.random
) -> float:
    """Seconds before the next pass after `errors` consecutive failed ones: the normal
    interval when healthy; then a backoff doubling from `interval` up to `cap`, of which
    a random half is waited ("equal jitter": between half and all of it). Each job's loop
    draws its own, so jobs that failed together (an API server outage) do not retry in
    step; waiting at least half keeps the backoff a backoff."""
    if errors <= 0:
        return interval
    backoff = float(min(cap, interval * 2 ** min(errors - 1, 30)))
    return backoff / 2 + draw() * backoff / 2


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    settings.persistence.finalizer = names.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.GROUP)
    settings.persistence.diffbase_storage = diffbase.NoDiffBase()  # no handler diffs
    settings.posting.level = logging.WARNING  # our own Events are posted by act.kube
    # Server-side: the API server streams only the trainer pods, not every pod in the
    # cluster (the handler's `labels=` filter alone would be applied client-side).
    settings.watching.label_selectors[POD_RESOURCE] = names.TRAINER_PODS_SELECTOR
    settings.watching.label_selectors[CONFIGMAP_RESOURCE] = names.PROGRESS_SELECTOR
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    config = _runtime(memo).config
    settings.peering.lifetime = config.peering_lifetime_seconds
    timeout = config.request_timeout_seconds
    settings.networking.request_timeout = timeout
    settings.networking.connect_timeout = timeout


@kopf.on.login()
async def login(
    logger: Any, settings: kopf.OperatorSettings, memo: Any, **_: Any
) -> kopf.AiohttpSession | None:
    """kopf's credentials on a session with a bounded connection pool (run.session)."""
    namespaces = len(_runtime(memo).config.namespaces)
    return await session.bounded_session(logger, settings, namespaces)


@kopf.on.startup()
async def start_background(memo: Any, **_: Any) -> None:
    """The fence's ticker runs on kopf's event loop: a gap in it is a frozen process.
    The heap trimmer (run.heap) gives back what a burst of passes freed."""
    runtime = _runtime(memo)
    if runtime.kube.fence is not None:
        runtime.background.append(asyncio.create_task(runtime.kube.fence.run()))
    release = heap.trimmer()
    if release is not None:
        runtime.background.append(asyncio.create_task(heap.trim_periodically(release)))


@kopf.on.cleanup()
async def stop_background(memo: Any, **_: Any) -> None:
    runtime = _runtime(memo)
    for task in runtime.background:
        task.cancel()
    runtime.passes.shutdown(wait=False, cancel_futures=True)


@kopf.daemon(*RESOURCE, id="reconcile", cancellation_timeout=10.0)
async def reconcile(
    namespace: str | None, name: str, stopped: kopf.DaemonStopped, logger: Any, memo: Any, **_: Any
) -> None:
    assert namespace is not None  # TuningJob is namespaced
    runtime = _runtime(memo)
    config = runtime.config
    trigger = runtime.trigger((namespace, name))
    # kopf starts no daemon before its indexed resources (the trainer pods and progress
    # maps, below) are listed whole, the first time the operator leads
    runtime.watched.listing_complete()
    errors = 0
    while not stopped:
        errors, wait = await _pass(runtime, namespace, name, logger, errors)
        if errors:  # backing off: a pod event does not cut the wait short
            cap = config.error_backoff_max_seconds
            await pause(stopped, None, retry_delay(errors, config.reconcile_seconds, cap))
        else:  # until the job's next deadline, or an event of its objects
            await pause(stopped, trigger, max(wait, config.reconcile_seconds))
        trigger.clear()
    if stopped.reason is not None and kopf.DaemonStoppingReason.OPERATOR_PAUSING in stopped.reason:
        runtime.watched.paused()


async def pause(stopped: Any, trigger: asyncio.Event | None, seconds: float) -> None:
    """Wait `seconds`, less if the daemon is stopped (job deleted, operator stopping)
    or `trigger` is set (a pod event, a spec change)."""
    waits = [asyncio.ensure_future(stopped.wait())]
    if trigger is not None:
        waits.append(asyncio.ensure_future(trigger.wait()))
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _pass(
    runtime: Runtime,
    namespace: str,
    name: str,
    logger: Any,
    errors: int,
    loops: health.LoopHealth = health.LOOPS,
) -> tuple[int, float]:
    """One reconcile pass: the number of consecutive failed passes after it, and the
    seconds until the job's next timed pass (run.runtime.next_pass; 0: soon). A 409 (the
    job changed since it was read, or a pod group still going) is no error: the next
    pass re-reads soon. Each outcome goes to `loops` (the liveness probe and the
    per-job reconcile metrics)."""
    job, key = f"{namespace}/{name}", (namespace, name)
    try:
        wait = await runtime.run_pass(namespace, name, logger)
    except executor.StaleGroup as err:
        log.info("%s: %s (waiting)", job, err)
        loops.succeeded(key)
        return 0, 0.0
    except Frozen as err:
        log.warning("%s: %s", job, err)
        return 0, 0.0
    except kube.ApiError as err:
        if err.status == 409:
            log.info("%s: %s (re-reading)", job, err)
            loops.succeeded(key)
            return 0, 0.0
        log.warning("%s: reconcile: %s (failure %d, backing off)", job, err, errors + 1)
        _failed(loops, key)
        return errors + 1, 0.0
    except (urllib3.exceptions.HTTPError, ConnectionError) as err:  # API server unreachable
        log.warning("%s: reconcile: API server unreachable: %s (failure %d, backing off)",
                    job, err, errors + 1)  # fmt: skip
        _failed(loops, key)
        return errors + 1, 0.0
    except Exception as err:
        log.warning("%s: reconcile failed (failure %d, backing off)", job, errors + 1, exc_info=err)
        _failed(loops, key)
        return errors + 1, 0.0
    loops.succeeded(key)
    return 0, wait


def _failed(loops: health.LoopHealth, key: tuple[str, str]) -> None:
    metrics.reconcile_failed()
    loops.failed(key)


@kopf.on.probe(id="reconcile")
def reconcile_probe(memo: Any, **_: Any) -> dict[str, object]:
    """`/healthz`: the job loops' report; fails (500) while every loop is failing and
    none has completed a pass for the configured time (run.health). A PermanentError:
    kopf would retry any other error inside the probe request, with its backoff."""
    try:
        return health.LOOPS.check(_runtime(memo).config.unhealthy_after_seconds)
    except health.Unhealthy as err:
        raise kopf.PermanentError(str(err)) from err


@kopf.on.event(*RESOURCE)
async def job_event(
    body: kopf.Body, type: str | None, namespace: str | None, name: str, memo: Any, **_: Any
) -> None:
    """Every version of a TuningJob feeds the cache (run.watched); a spec change
    (generation ahead of the one the operator last decided on) wakes the job's loop at
    once: a finished job may have to start again."""
    if not namespace:
        return
    runtime = _runtime(memo)
    runtime.watched.job_event((namespace, name), dict(body), type == "DELETED")
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):  # kopf stops the daemon; cleanup forgets the job
        return
    generation = meta.get("generation")
    observed = (body.get("status") or {}).get(st.OBSERVED_GENERATION)
    if generation is not None and generation != observed:
        runtime.wake((namespace, name))


LabelFilter = Mapping[str, Any]  # kopf's filter type is not exported
TRAINER_POD_LABELS: LabelFilter = {
    names.LABEL_MANAGED_BY: names.MANAGED_BY,
    names.LABEL_JOB: kopf.PRESENT,
}
PROGRESS_LABELS: LabelFilter = {
    names.LABEL_MANAGED_BY: names.MANAGED_BY,
    names.LABEL_COMPONENT: names.COMPONENT_PROGRESS,
}


@kopf.index(*POD_RESOURCE, labels=TRAINER_POD_LABELS)
async def trainer_pods_listed(body: kopf.Body, namespace: str | None, memo: Any, **_: Any) -> None:
    """The trainer pods are an indexed resource so that kopf lists them whole before it
    starts any job's daemon (run.watched.listing_complete). kopf calls an index handler
    before the other handlers of the same version and never for a deletion: the copy
    it brings goes into the cache (the event handler below brings it again, a no-op).
    Nothing goes into kopf's index (None)."""
    pod = dict(body)
    job = job_of(pod)
    if job and namespace:
        _runtime(memo).watched.pod_event((namespace, job), pod, deleted=False)


@kopf.index(*CONFIGMAP_RESOURCE, labels=PROGRESS_LABELS)
async def progress_listed(body: kopf.Body, namespace: str | None, memo: Any, **_: Any) -> None:
    """The progress maps, indexed for the same reason as the trainer pods."""
    configmap = dict(body)
    job = job_of(configmap)
    if job and namespace:
        _runtime(memo).watched.progress_event((namespace, job), configmap, deleted=False)


@kopf.on.event(*POD_RESOURCE, labels=TRAINER_POD_LABELS)
async def pod_event(
    body: kopf.Body, type: str | None, namespace: str | None, memo: Any, **_: Any
) -> None:
    pod = dict(body)
    job = job_of(pod)
    if job and namespace:
        _runtime(memo).pod_seen(namespace, job, pod, deleted=type == "DELETED")


@kopf.on.event(*CONFIGMAP_RESOURCE, labels=PROGRESS_LABELS)
async def progress_event(
    body: kopf.Body, type: str | None, namespace: str | None, memo: Any, **_: Any
) -> None:
    """A trainer's progress report (its ConfigMap, filtered by the API server to the
    jobs' progress maps) feeds the cache and wakes the job's loop: status follows it
    within a pass, not a polling interval."""
    job = job_of(dict(body))
    if job and namespace:
        runtime = _runtime(memo)
        runtime.watched.progress_event((namespace, job), dict(body), type == "DELETED")
        runtime.wake((namespace, job))


@kopf.on.event(*NODE_RESOURCE)
async def node_event(body: kopf.Body, type: str | None, memo: Any, **_: Any) -> None:
    """Nodes (trimmed to what classification reads): a node's loss is seen as it is
    reported, with no per-pass read, and wakes the jobs with a pod on it."""
    runtime = _runtime(memo)
    for key in runtime.watched.node_event(dict(body), type == "DELETED"):
        runtime.wake(key)


@kopf.on.delete(*RESOURCE, id="cleanup")
def cleanup(
    body: kopf.Body, namespace: str | None, name: str, logger: Any, memo: Any, **_: Any
) -> None:
    assert namespace is not None
    runtime = _runtime(memo)
    executor.cleanup(runtime.kube, dict(body), logger)
    runtime.forget((namespace, name))
    health.LOOPS.forget((namespace, name))
