"""FAKES of what the operator talks to, for the unit tests (the real API calls are
exercised by tests/e2e):

- :class:`FakeApiClient`: the kubernetes ApiClient under tuneop.act.kube.Kube; it records
  what would go on the wire and answers one given status (:func:`kube_on` builds a Kube
  on it);
- :class:`FakeKube`: tuneop.act.kube.Kube itself, in memory: objects by (kind, name), the
  writes recorded in order;
- :class:`Clock`: a monotonic clock the test moves.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from tuneop.act import kube
from tuneop.api import owners
from tuneop.api.events import Event

Obj = dict[str, Any]

JOB: Obj = {
    "metadata": {
        "name": "j",
        "namespace": "ns",
        "uid": "u",
        "generation": 1,
        "resourceVersion": "7",
    },
    "spec": {"image": "img", "hypermodel": "m:H"},
}
LOG = logging.getLogger("test")
QUOTA_REFUSAL = (403, 'pods "j-worker-0" is forbidden: exceeded quota: gpus')
"""How the API server refuses a pod beyond a ResourceQuota (status, message)."""


class FakeResponse:
    def __init__(self, status: int, data: Any) -> None:
        self.status = status
        self.data = json.dumps(data).encode() if data is not None else b""

    def read(self) -> None:
        return None


class FakeApiClient:
    """FAKE: records (method, path, body, kwargs of call_api) and answers `status`."""

    def __init__(self, status: int = 200, data: Any = None) -> None:
        self.sent: list[tuple[str, str, Any, dict[str, Any]]] = []
        self.status, self.data = status, data

    def param_serialize(self, *, method: str, resource_path: str, body: Any, **_: Any) -> Any:
        return method, resource_path, {}, body, None

    def call_api(self, method: str, url: str, *, body: Any = None, **kwargs: Any) -> FakeResponse:
        self.sent.append((method, url, body, kwargs))
        return FakeResponse(self.status, self.data)


def kube_on(api: FakeApiClient) -> kube.Kube:
    """A real Kube whose requests go to `api`."""
    k = kube.Kube.__new__(kube.Kube)
    k.api = api  # type: ignore[assignment]
    k.timeout = 12.5
    return k


def stored_object(
    kind: str, name: str, owner_uid: str | None, uid: str = "x", **labels: str
) -> Obj:
    """An object as the API server holds it, owned by the TuningJob `j` of uid
    `owner_uid` (None: no owner)."""
    meta: Obj = {"name": name, "uid": uid, "labels": labels}
    if owner_uid is not None:
        meta["ownerReferences"] = [{**owners.owner_reference(JOB), "uid": owner_uid}]
    return {"kind": kind, "metadata": meta}


class FakeKube(kube.Kube):
    """FAKE of the operator's API layer, in memory.

    `objects` by (kind, name) (one namespace): create answers False (a 409) when the name
    is taken, get and list_pods read them, delete removes them. `job` is what get_job
    reads. `refuse_pods` (status, message): the API server refuses every pod so.
    `pod_quota`: a ResourceQuota of that many pods, checked as the API server does,
    before the name is looked up (a pod that exists is refused too when it is full).

    Recorded: `calls`, the writes in order as (verb, "Kind/name") (`("patch_status",
    "<the status keys>")`, `("event", reason)`) and the reads of ConfigMaps by name
    (`("get", "ConfigMap/<name>")`, the read phase's order); `patches`, the status patches;
    `deleted`, (kind, name, uid precondition); `nodes`, the Nodes read (each answered as
    a bare Node); `reads`, every read the operator's pass makes of the job, its pods,
    ConfigMaps and Nodes, in order. With `stores_status` a status patch is merged into
    `job` (resourceVersion + 1) and answered with it, as the API server does.
    """

    def __init__(
        self,
        objects: dict[tuple[str, str], Obj] | None = None,
        *,
        job: Obj | None = None,
        refuse_pods: tuple[int, str] | None = None,
        pod_quota: int | None = None,
        stores_status: bool = False,
    ) -> None:
        self.objects = {} if objects is None else objects
        self.stores_status = stores_status
        self.reads: list[str] = []
        self.job = job
        self.refuse_pods = refuse_pods
        self.pod_quota = pod_quota
        self.calls: list[tuple[str, str]] = []
        self.patches: list[Obj] = []
        self.deleted: list[tuple[str, str, str | None]] = []
        self.released: list[tuple[str, str | None]] = []
        self.nodes: list[str] = []

    @property
    def events(self) -> list[str]:
        """The reasons of the Events posted, in order."""
        return [what for call, what in self.calls if call == "event"]

    def of_kind(self, kind: str) -> list[Obj]:
        """The objects of `kind` held, in the order they were created."""
        return [obj for (k, _), obj in self.objects.items() if k == kind]

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Obj | None:
        raise AssertionError(f"FakeKube has no API server for {method} {path}")

    def _key(self, path: str) -> tuple[str, str] | None:
        *_, plural, name = path.split("/")
        kind = next((k for k, (_, p) in kube._PATHS.items() if p == plural), None)
        return None if kind is None else (kind, name)

    # --- reads ---------------------------------------------------------------------
    def get(self, path: str) -> Obj | None:
        key = self._key(path)
        return None if key is None else self.objects.get(key)

    def get_job(self, namespace: str, name: str) -> Obj | None:
        self.reads.append("job")
        return self.job

    def list_pods_at(self, namespace: str, job: str) -> tuple[list[Obj], Obj]:
        self.reads.append("pods")
        return self.of_kind("Pod"), {}

    def get_configmap(self, namespace: str, name: str) -> Obj | None:
        self.reads.append(f"ConfigMap/{name}")
        self.calls.append(("get", f"ConfigMap/{name}"))
        return self.objects.get(("ConfigMap", name))

    def get_node(self, name: str) -> Obj | None:
        self.reads.append(f"Node/{name}")
        self.nodes.append(name)
        return {"metadata": {"name": name}}

    # --- writes --------------------------------------------------------------------
    def create(self, obj: Obj) -> bool:
        meta = obj["metadata"]
        refusal = self.refuse_pods
        if self.pod_quota is not None and len(self.of_kind("Pod")) >= self.pod_quota:
            refusal = (403, f'pods "{meta["name"]}" is forbidden: exceeded quota: pods')
        if obj["kind"] == "Pod" and refusal is not None:
            body = json.dumps({"message": refusal[1]})
            path = kube.collection("Pod", meta["namespace"])
            raise kube.ApiError(refusal[0], body, "POST", path)
        self.calls.append(("create", f"{obj['kind']}/{meta['name']}"))
        key = (obj["kind"], meta["name"])
        if key in self.objects:
            return False
        self.objects[key] = obj
        return True

    def release_pod(self, namespace: str, name: str, uid: str | None) -> bool:
        self.released.append((name, uid))
        return ("Pod", name) in self.objects

    def delete(
        self, kind: str, namespace: str, name: str, *, uid: str | None = None, **options: Any
    ) -> bool:
        self.calls.append(("delete", f"{kind}/{name}"))
        self.deleted.append((kind, name, uid))
        return self.objects.pop((kind, name), None) is not None

    def patch_status(
        self, namespace: str, name: str, status: Obj, *, resource_version: str | None = None
    ) -> Obj | None:
        self.calls.append(("patch_status", ",".join(sorted(status))))
        self.patches.append(status)
        if not (self.stores_status and self.job is not None):
            return None
        meta = self.job["metadata"]
        version = str(int(meta.get("resourceVersion") or 0) + 1)
        merged = {**(self.job.get("status") or {}), **status}
        self.job = {**self.job, "metadata": {**meta, "resourceVersion": version}, "status": merged}
        return self.job

    def post_event(self, job: Obj, event: Event) -> None:
        self.calls.append(("event", event.reason))


class Clock:
    """A monotonic clock that stands still until the test moves `now`."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
