"""The operator's only side effects: a small JSON REST layer over the `kubernetes`
client's configuration (in-cluster or KUBECONFIG), and `apply`, which carries out a
reconcile.Decision in a crash-safe order: create children and pods (409 = exists),
patch status, delete pods, post Events, delete the job (TTL)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import urllib.parse
from typing import Any

import kubernetes

from . import builders, names, queue
from .decision import Decision, Event
from .fence import Fence
from .groups import group_named
from .spec import JobSpec

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


def owned_by(obj: Obj, job: Obj) -> bool:
    """`obj` is this job's: it names the job's uid among its owners, or (a retained
    checkpoint claim, which has no owner) it has no owner and the job's labels."""
    meta = obj.get("metadata") or {}
    uids = builders.owner_uids(obj)
    if uids:
        return str(job["metadata"].get("uid")) in uids
    if meta.get("ownerReferences"):
        return False
    labels = meta.get("labels") or {}
    return (
        labels.get(names.LABEL_MANAGED_BY) == names.MANAGED_BY
        and labels.get(names.LABEL_JOB) == job["metadata"]["name"]
        and obj.get("kind", "PersistentVolumeClaim") == "PersistentVolumeClaim"
    )


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
        found = self.request(
            "GET",
            collection("Pod", namespace),
            query={"labelSelector": names.job_selector(job)},
        )
        return list((found or {}).get("items") or [])

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


class PodRejected(Exception):
    """The API server refused to create a trainer pod (HTTP 403/422: a ResourceQuota,
    Pod Security or another admission check). Nothing else of the decision is applied;
    the next pass tries again (quota may be freed)."""


class StaleGroup(Exception):
    """A pod with the wanted name belongs to an older pod group: wait for it to go."""


def _path_of(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{collection(obj['kind'], meta['namespace'])}/{meta['name']}"


def create_pod(kube: Kube, job: Obj, pod: Obj) -> None:
    """Create a pod of the group; one that exists already must be this very group's
    (created before a crash). A pod of an older group, or of an older job of the same
    name that is still terminating, is waited for (StaleGroup), never adopted. A pod
    the API server refuses (quota, admission) raises PodRejected with its message."""
    try:
        created = kube.create(pod)
    except ApiError as err:
        if err.status in (403, 422):
            raise PodRejected(f"pod {pod['metadata']['name']} was refused: {err.reason}") from err
        raise
    if created:
        return
    meta = pod["metadata"]
    existing = kube.get(_path_of(pod)) or {}
    if existing and not owned_by({**existing, "kind": "Pod"}, job):
        raise StaleGroup(f"pod {meta['name']} of another TuningJob of this name still exists")
    have = ((existing.get("metadata") or {}).get("labels") or {}).get(names.LABEL_ATTEMPT)
    if have is not None and have != meta["labels"][names.LABEL_ATTEMPT]:
        raise StaleGroup(f"pod {meta['name']} of pod group {have} still exists")


def ensure_child(kube: Kube, job: Obj, child: Obj) -> bool:
    """Create `child`; True if created. If the name is taken the object must be the
    job's own (ChildConflict otherwise: never adopt someone else's object)."""
    if kube.create(child):
        return True
    existing = kube.get(_path_of(child))
    if existing is not None and not owned_by({**existing, "kind": child["kind"]}, job):
        owners = ", ".join(sorted(builders.owner_uids(existing))) or "none"
        raise ChildConflict(
            f"{child['kind']} {child['metadata']['name']} exists and is not owned by this "
            f"TuningJob (owner uids: {owners}); delete or rename it"
        )
    return False


REFRESHED = {"ConfigMap": "data", "Role": "rules"}
"""Children that start each pod group as built (the field compared): the spec file
follows spec changes (the mutable fields), the progress map is emptied (the last
group's record says nothing about the new one), the trainer's Role follows the
operator's version (a job created by an older operator gets the current rule)."""


def refresh_child(
    kube: Kube,
    child: Obj,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = log,
) -> None:
    """Replace (delete + create) the job's own `child` when its REFRESHED field differs
    from the built one. Only called before a group's pods are created: no trainer
    mounts, reports to or acts under these objects then."""
    meta, field = child["metadata"], REFRESHED[child["kind"]]
    existing = kube.get(_path_of(child))
    if existing is not None and (existing.get(field) or {}) == (child.get(field) or {}):
        return
    uid = ((existing or {}).get("metadata") or {}).get("uid")
    kube.delete(child["kind"], meta["namespace"], meta["name"], uid=uid)
    kube.create(child)
    logger.info("reset %s %s for the new pod group", child["kind"], meta["name"])


def apply(
    kube: Kube,
    job: Obj,
    decision: Decision,
    *,
    metrics_port: int,
    uid: int,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = log,
) -> None:
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    spec = JobSpec.from_dict(job.get("spec") or {})
    if decision.ensure_children:
        for child in builders.build_children(job, spec):
            if ensure_child(kube, job, child):
                logger.info("created %s %s", child["kind"], child["metadata"]["name"])
            elif child["kind"] in REFRESHED:
                progress_map = child["metadata"]["name"] == names.progress_configmap_name(name)
                if decision.reset_progress or not progress_map:
                    refresh_child(kube, child, logger)
    # the pods see the status this decision writes (status.oomTrials -> their env)
    updated = {**job, "status": decision.merged_status(job)}
    for index in decision.create_pods:
        pod = builders.build_pod(
            updated, spec, index, decision.create_attempt, metrics_port=metrics_port, uid=uid
        )
        create_pod(kube, job, pod)
    for group_name, attempt in decision.create_groups:
        group = group_named(name, spec, group_name)
        if group is None:  # the decision was made from this very spec
            continue
        for index in range(len(group.pod_names)):
            pod = builders.build_pod(
                updated, spec, index, attempt, metrics_port=metrics_port, uid=uid, group=group
            )
            create_pod(kube, job, pod)
    if decision.status:
        rv = meta.get("resourceVersion")
        kube.patch_status(namespace, name, decision.status, resource_version=rv)
        if kube.fence is not None:
            kube.fence.committed()  # accepted as current: carry out the rest (fence.py)
    for ref in decision.release_pods:
        if kube.release_pod(namespace, ref.name, ref.uid):
            logger.info("released pod %s from its Kueue pod group", ref.name)
    for ref in decision.delete_pods:
        if kube.delete("Pod", namespace, ref.name, uid=ref.uid):
            logger.info("deleted pod %s (uid %s)", ref.name, ref.uid)
    for event in decision.events:
        logger.info("%s %s: %s", event.type, event.reason, event.message)
        try:
            kube.post_event(job, event)
        except ApiError as err:  # an Event lost is not worth a retry of the decision
            logger.warning("could not post event %s: %s", event.reason, err)
    if decision.delete_job:
        logger.info("ttlSecondsAfterFinished passed: deleting the TuningJob")
        kube.delete(names.KIND, namespace, name)


def _delete_owned(
    kube: Kube,
    job: Obj,
    kind: str,
    name: str,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> bool:
    """Delete the job's child `name` only if it is the job's (by owner uid), and only
    that object (uid precondition). True if deleted."""
    namespace = job["metadata"]["namespace"]
    existing = kube.get(f"{collection(kind, namespace)}/{name}")
    if existing is None:
        return False
    if not owned_by({**existing, "kind": kind}, job):
        logger.info("kept %s %s: not owned by this TuningJob", kind, name)
        return False
    return kube.delete(kind, namespace, name, uid=(existing.get("metadata") or {}).get("uid"))


def cleanup(
    kube: Kube, job: Obj, logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = log
) -> None:
    """On job deletion: pods and the service go at once (they are owned too, but the
    garbage collector may lag); the created claim only with reclaimPolicy Delete. Only
    objects owned by this job (its uid) are deleted: a job re-created under the same
    name, or a user's object that happens to have a child's name, is left alone."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    spec = JobSpec.from_dict(job.get("spec") or {})
    for pod in kube.list_pods(namespace, name):
        if owned_by({**pod, "kind": "Pod"}, job):
            kube.delete("Pod", namespace, pod["metadata"]["name"], uid=pod["metadata"].get("uid"))
    sa = names.service_account_name(name)
    for kind, child in (("Service", names.service_name(name)),
                        ("ConfigMap", names.configmap_name(name)),
                        ("ConfigMap", names.progress_configmap_name(name)),
                        ("RoleBinding", sa), ("Role", sa), ("ServiceAccount", sa)):  # fmt: skip
        _delete_owned(kube, job, kind, child, logger)
    if not spec.checkpoint.existing_claim and spec.checkpoint.reclaim_policy == "Delete":
        if _delete_owned(kube, job, "PersistentVolumeClaim", names.pvc_name(name), logger):
            logger.info("deleted the checkpoint claim (reclaimPolicy Delete)")
    else:
        logger.info("kept the checkpoint claim %s", builders.claim_name(job, spec))
