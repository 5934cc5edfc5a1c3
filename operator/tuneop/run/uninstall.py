"""`python -m tuneop.run.uninstall`: what the chart's pre-delete hook runs before `helm
uninstall` removes the operator.

The operator keeps a finalizer on every TuningJob (it deletes the job's children
first); without an operator nobody would take it off, and neither the jobs nor their
namespaces could be deleted. So the hook stops the operator (its Deployment scaled to
0, its pods gone: a running replica would put the finalizer back) and takes the
finalizer off every TuningJob it watched. The jobs are left as they are: a running
search keeps its pods until its job is deleted (they are owned by it, so deleting the
job or its namespace deletes them), and an operator installed again adopts the job and
puts the finalizer back. One line on stdout says what was done; exit 1 with one line on
stderr when the API refuses.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from ..act.kube import load_config
from ..api import names

POLL_SECONDS = 1.0
REQUEST_SECONDS = 30.0
"""Each API call's own limit: an API server that accepts and never answers must not hold
the hook until its Job's deadline, with nothing said."""
CALL = {"_request_timeout": REQUEST_SECONDS}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    api = kubernetes.client.ApiClient(load_config())
    try:
        stopped = stop_operator(kubernetes.client.AppsV1Api(api), kubernetes.client.CoreV1Api(api),
                                args.namespace, args.deployment, args.timeout)  # fmt: skip
        namespaces = [n for n in args.watch_namespaces.split(",") if n] or [None]
        custom = kubernetes.client.CustomObjectsApi(api)
        released = sum(release_jobs(custom, namespace) for namespace in namespaces)
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        print(f"tuneop uninstall: {_one_line(exc)}", file=sys.stderr)
        return 1
    print(f"tuneop uninstall: operator {stopped}; finalizer {names.FINALIZER} released "
          f"from {released} TuningJob(s), which keep running until deleted")  # fmt: skip
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tuneop.run.uninstall", description=__doc__)
    parser.add_argument("--namespace", required=True, help="the release's namespace")
    parser.add_argument("--deployment", required=True, help="the operator's Deployment")
    parser.add_argument("--watch-namespaces", default="", help="comma-separated; empty: all")
    parser.add_argument("--timeout", type=float, default=180.0, help="for the pods to go")
    return parser


def stop_operator(apps: Any, core: Any, namespace: str, deployment: str, timeout: float) -> str:
    """Scale the Deployment to 0 and wait until its pods are gone; what happened."""
    try:
        found = apps.read_namespaced_deployment(deployment, namespace, **CALL)
    except ApiException as exc:
        if exc.status == 404:
            return "already gone"
        raise
    scale = {"spec": {"replicas": 0}}
    apps.patch_namespaced_deployment_scale(deployment, namespace, scale, **CALL)
    labels = found.spec.selector.match_labels or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    deadline = time.monotonic() + timeout
    while core.list_namespaced_pod(namespace, label_selector=selector, **CALL).items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the operator's pods ({selector}) still run after {timeout:.0f} s")
        time.sleep(POLL_SECONDS)
    return "stopped"


def release_jobs(custom: Any, namespace: str | None) -> int:
    """Take the operator's finalizer off each TuningJob in `namespace` (None: all);
    how many had it. A job changed meanwhile is read again (resourceVersion
    precondition)."""
    released = 0
    for job in _jobs(custom, namespace):
        meta = job["metadata"]
        while names.FINALIZER in (meta.get("finalizers") or []):
            rest = [f for f in meta["finalizers"] if f != names.FINALIZER]
            body = {"metadata": {"finalizers": rest, "resourceVersion": meta["resourceVersion"]}}
            try:
                custom.patch_namespaced_custom_object(
                    names.GROUP,
                    names.VERSION,
                    meta["namespace"],
                    names.PLURAL,
                    meta["name"],
                    body,
                    **CALL,
                )
                released += 1
                break
            except ApiException as exc:
                if exc.status == 404:
                    break
                if exc.status != 409:
                    raise
                meta = custom.get_namespaced_custom_object(
                    names.GROUP,
                    names.VERSION,
                    meta["namespace"],
                    names.PLURAL,
                    meta["name"],
                    **CALL,
                )["metadata"]
    return released


def _jobs(custom: Any, namespace: str | None) -> list[dict[str, Any]]:
    if namespace is None:
        listed = custom.list_cluster_custom_object(names.GROUP, names.VERSION, names.PLURAL, **CALL)
    else:
        listed = custom.list_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL, **CALL
        )
    return list(listed.get("items") or [])


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}: {(exc.body or '').strip()[:300]}"
    if isinstance(exc, urllib3.exceptions.HTTPError):
        return f"the API server did not answer: {type(exc).__name__}: {str(exc)[:300]}"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
