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


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = f"{names.GROUP}/cleanup"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=names.GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # our own Events are posted by tuneop.kube
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60


@kopf.daemon(*RESOURCE, id="reconcile", cancellation_timeout=10.0)
async def reconcile(
    namespace: str | None, name: str, stopped: kopf.DaemonStopped, logger: Any, memo: Any, **_: Any
) -> None:
    assert namespace is not None  # TuningJob is namespaced
    runtime = _runtime(memo)
    trigger = runtime.trigger((namespace, name))
    while not stopped:
        try:
            await asyncio.to_thread(runtime.reconcile_once, namespace, name, logger)
        except (kube.ApiError, kube.StaleGroup) as err:
            logger.warning("reconcile: %s (retrying)", err)
        except Exception:
            logger.exception("reconcile failed (retrying)")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(trigger.wait(), timeout=runtime.config.reconcile_seconds)
        trigger.clear()


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
