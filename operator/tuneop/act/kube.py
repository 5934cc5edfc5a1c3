"""The operator's API client: a small JSON REST layer over the `kubernetes` client's
configuration (in-cluster or KUBECONFIG), with timeouts, uid/resourceVersion
preconditions and the fence (act.fence) before every write. It speaks the API's
vocabulary (api.names, api.queue, api.events) and nothing of decisions or builders:
what the operator does with it, a Decision carried out in a crash-safe order, is
act.executor."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import urllib.parse
from typing import Any

import kubernetes

from ..api import names, queue
from ..api.events import Event
from .fence import Fence

Obj = dict[str, Any]
log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, body: str, method: str, path: str) -> None:
        self.status = status
        self.body = body
        try:
            self.reason = str(json.loads(body).get("message", body))
        except (ValueError, AttributeError):
            self.reason = body
        super().__init__(f"{method} {path}: HTTP {status}: {self.reason}")


def load_config() -> kubernetes.client.Configuration:
    """In-cluster config when running in a pod, else $KUBECONFIG / ~/.kube/config."""
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return configuration


_PATHS = {
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "Service": ("/api/v1", "services"),
    "Pod": ("/api/v1", "pods"),
    "Event": ("/api/v1", "events"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    names.KIND: (f"/apis/{names.API_VERSION}", names.PLURAL),
}


def collection(kind: str, namespace: str) -> str:
    prefix, plural = _PATHS[kind]
    return f"{prefix}/namespaces/{namespace}/{plural}"


def delete_options(uid: str | None, **options: Any) -> Obj:
    body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", **options}
    if uid:
        body["preconditions"] = {"uid": uid}
    return body


def status_patch(status: Obj, resource_version: str | None) -> Obj:
    patch: Obj = {"status": status}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch


class ChildConflict(Exception):
    """A child's name is taken by an object this job does not own: not adopted."""


DEFAULT_TIMEOUT = 30.0


class Kube:
    fence: Fence | None = None

    def __init__(
        self,
        configuration: kubernetes.client.Configuration | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        fence: Fence | None = None,
    ) -> None:
        self.api = kubernetes.client.ApiClient(configuration or load_config())
        self.timeout = timeout
        """Seconds for a whole call (config: TUNEOP_OPERATOR_REQUEST_TIMEOUT_SECONDS)."""
        self.fence = fence
        """Asked before every write (fence.Frozen: the pass read before a freeze)."""

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj | None:
        if method != "GET" and self.fence is not None:
            self.fence.check()
        url_path = path + ("?" + urllib.parse.urlencode(query) if query else "")
        _, url, headers, body_, _ = self.api.param_serialize(
            method=method,
            resource_path=url_path,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(
            method,
            url,
            header_params=headers,
            body=body_,
            _request_timeout=self.timeout,
        )
        response.read()  # type: ignore[no-untyped-call]
        data = response.data.decode() if isinstance(response.data, bytes) else response.data
        if response.status >= 400:
            raise ApiError(response.status, data or "", method, path)
        return json.loads(data) if data else None

    # --- reads -------------------------------------------------------------------
    def get(self, path: str) -> Obj | None:
        try:
            return self.request("GET", path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def get_job(self, namespace: str, name: str) -> Obj | None:
        return self.get(f"{collection(names.KIND, namespace)}/{name}")

    def list_pods(self, namespace: str, job: str) -> list[Obj]:
        return self.list_pods_at(namespace, job)[0]

    def list_pods_at(self, namespace: str, job: str) -> tuple[list[Obj], Obj]:
        """The job's trainer pods (the pod watch's selector) and the list's metadata
        (its resourceVersion: which watched pods are newer than the list)."""
        found = self.request(
            "GET",
            collection("Pod", namespace),
            query={"labelSelector": names.job_selector(job)},
        )
        return list((found or {}).get("items") or []), dict((found or {}).get("metadata") or {})

    def get_node(self, name: str) -> Obj | None:
        return self.get(f"/api/v1/nodes/{name}")

    def get_configmap(self, namespace: str, name: str) -> Obj | None:
        return self.get(f"{collection('ConfigMap', namespace)}/{name}")

    # --- writes ------------------------------------------------------------------
    def create(self, obj: Obj) -> bool:
        """Create `obj`; False if it exists already (409)."""
        meta = obj["metadata"]
        try:
            self.request("POST", collection(obj["kind"], meta["namespace"]), obj)
        except ApiError as err:
            if err.status == 409:
                return False
            raise
        return True

    def delete(
        self, kind: str, namespace: str, name: str, *, uid: str | None = None, **options: Any
    ) -> bool:
        """Delete `name`; with `uid`, only that very object (a precondition: a successor
        created under the same name is left alone). False if there was nothing to delete."""
        body = delete_options(uid, **options)
        try:
            self.request("DELETE", f"{collection(kind, namespace)}/{name}", body)
        except ApiError as err:
            if err.status == 404 or (err.status == 409 and uid):
                return False
            raise
        return True

    def release_pod(self, namespace: str, name: str, uid: str | None) -> bool:
        """Declare the pod's Kueue pod group over (queue.release_patch), only on that very
        pod (uid in the patch: a successor under the same name is left alone). False if
        it is gone."""
        patch = queue.release_patch()
        if uid:
            patch["metadata"]["uid"] = uid
        try:
            self.request(
                "PATCH",
                f"{collection('Pod', namespace)}/{name}",
                patch,
                content_type=MERGE_PATCH,
            )
        except ApiError as err:
            if err.status in (404, 409, 422):  # gone, or a successor (the uid differs)
                return False
            raise
        return True

    def get_workload(self, namespace: str, name: str) -> Obj | None:
        """A Kueue Workload; None if absent or not readable (Kueue not installed, or no
        right to read it: its message is only a nicety)."""
        try:
            return self.get(f"{queue.WORKLOAD_API}/namespaces/{namespace}/workloads/{name}")
        except ApiError as err:
            if err.status in (403, 404):
                return None
            raise

    def patch_status(
        self, namespace: str, name: str, status: Obj, *, resource_version: str | None = None
    ) -> Obj | None:
        """Merge-patch .status; with `resource_version`, only if the job has not changed
        since it was read (HTTP 409 otherwise: a stale writer never overwrites a newer
        decision)."""
        return self.request(
            "PATCH",
            f"{collection(names.KIND, namespace)}/{name}/status",
            status_patch(status, resource_version),
            content_type=MERGE_PATCH,
        )

    def post_event(self, job: Obj, event: Event) -> None:
        meta = job["metadata"]
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:1024],
            "source": {"component": names.COMPONENT},
            "reportingComponent": names.COMPONENT,
            "reportingInstance": os.environ.get("HOSTNAME") or socket.gethostname(),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.request("POST", collection("Event", meta["namespace"]), body)
