"""Pods that run a Python snippet on the local cluster (test infrastructure).

:func:`python_pod` builds one (the node agent runs ``python`` with the repository's
interpreter, see :func:`~tests.localcluster.nodeagent.podspec.container_argv`),
:func:`create` creates it, :func:`watch_until_deleted` returns it as it was deleted.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from kubernetes import watch

if TYPE_CHECKING:
    from tests.localcluster.cluster import LocalCluster

PY_SLEEP = "import time\nprint('started', flush=True)\nwhile True: time.sleep(0.2)"
"""A snippet that prints ``started`` and then idles until it is killed."""


def python_pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    """A Pod (restartPolicy Never) whose container ``main`` runs ``script``; ``spec``
    fields are the pod's, but ``container`` is merged into the container and ``labels``
    replaces the default label ``test: <name>`` (pure)."""
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": ["python", "-c", textwrap.dedent(script)],
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": spec.pop("labels", {"test": name})},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def create(cluster: LocalCluster, ns: str, body: dict[str, Any]) -> None:
    """Create the pod ``body`` in namespace ``ns``."""
    cluster.core.create_namespaced_pod(ns, body, _preload_content=False)


def watch_until_deleted(cluster: LocalCluster, ns: str, name: str, rv: str) -> dict[str, Any]:
    """The pod as it was deleted (final status included), watching from ``rv``."""
    for event in watch.Watch().stream(
        cluster.core.list_namespaced_pod, ns, field_selector=f"metadata.name={name}",
        resource_version=rv, timeout_seconds=60,
    ):  # fmt: skip
        if event["type"] == "DELETED":
            return dict(cluster.api.sanitize_for_serialization(event["object"]))
    raise TimeoutError(f"pod {ns}/{name} not deleted")
