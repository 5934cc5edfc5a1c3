"""Thin kopf handlers. The work happens in Runtime.reconcile_once (read, decide, apply),
run by one daemon per TuningJob every few seconds and whenever one of its pods changes;
kopf provides the watch, the finalizer for cleanup, peering and the liveness probe."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import kopf

from . import kube, names
from .runtime import Runtime, job_of

RESOURCE = (names.GROUP, names.VERSION, names.PLURAL)


def _runtime(memo: Any) -> Runtime:
    runtime = getattr(memo, "runtime", None)
    if not isinstance(runtime, Runtime):
        raise kopf.PermanentError("tuneop runtime missing: start with `python -m tuneop`")
    return runtime


log = logging.getLogger(__name__)
"""Retries are logged here, not through kopf's per-object logger: that one turns each
warning into a Kubernetes Event."""


def retry_delay(errors: int, interval: float, cap: float) -> float:
    """Seconds before the next pass after `errors` consecutive failed ones: the normal
    interval when healthy, then doubling, at most `cap`."""
    if errors <= 0:
        return interval
    return float(min(cap, interval * 2 ** min(errors - 1, 30)))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    settings.persistence.finalizer = f"{names.GROUP}/cleanup"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=names.GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # our own Events are posted by tuneop.kube
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    timeout = _runtime(memo).config.request_timeout_seconds
    settings.networking.request_timeout = timeout
    settings.networking.connect_timeout = timeout


@kopf.daemon(*RESOURCE, id="reconcile", cancellation_timeout=10.0)
async def reconcile(
    namespace: str | None, name: str, stopped: kopf.DaemonStopped, logger: Any, memo: Any, **_: Any
) -> None:
    assert namespace is not None  # TuningJob is namespaced
    runtime = _runtime(memo)
    config = runtime.config
    trigger = runtime.trigger((namespace, name))
    errors = 0
    while not stopped:
        errors = await _pass(runtime, namespace, name, logger, errors)
        delay = retry_delay(errors, config.reconcile_seconds, config.error_backoff_max_seconds)
        if errors:  # backing off: a pod event does not cut the wait short
            await asyncio.sleep(delay)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(trigger.wait(), timeout=delay)
        trigger.clear()


async def _pass(runtime: Runtime, namespace: str, name: str, logger: Any, errors: int) -> int:
    """One reconcile pass; the number of consecutive failed passes after it. A 409 (the
    job changed since it was read, or a pod group still going) is no error: the next
    pass, at the normal interval, re-reads."""
    job = f"{namespace}/{name}"
    try:
        await asyncio.to_thread(runtime.reconcile_once, namespace, name, logger)
    except kube.StaleGroup as err:
        log.info("%s: %s (waiting)", job, err)
        return 0
    except kube.ApiError as err:
        if err.status == 409:
            log.info("%s: %s (re-reading)", job, err)
            return 0
        log.warning("%s: reconcile: %s (failure %d, backing off)", job, err, errors + 1)
        return errors + 1
    except Exception as err:
        log.warning("%s: reconcile failed (failure %d, backing off)", job, errors + 1, exc_info=err)
        return errors + 1
    return 0


@kopf.on.event(
    "",
    "v1",
    "pods",
    labels={names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_JOB: kopf.PRESENT},
)
async def pod_event(body: kopf.Body, namespace: str | None, memo: Any, **_: Any) -> None:
    pod = dict(body)
    job = job_of(pod)
    if job and namespace:
        _runtime(memo).pod_seen(namespace, job, pod)


@kopf.on.delete(*RESOURCE, id="cleanup")
def cleanup(
    body: kopf.Body, namespace: str | None, name: str, logger: Any, memo: Any, **_: Any
) -> None:
    assert namespace is not None
    runtime = _runtime(memo)
    kube.cleanup(runtime.kube, dict(body), logger)
    runtime.forget((namespace, name))
