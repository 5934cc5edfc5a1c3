"""The operator's side effects: `apply` carries out a reconcile Decision, its objects as
the decision rendered them, in a crash-safe order (create children and pods, 409 =
exists and must be ours; after the job's first pod group its children are read before
any create, as they most likely exist; patch status; release and delete pods; post Events; delete
the job at its TTL), `apply_pass` decides and
applies one pass (deciding again when the API server refuses the pods), and `cleanup`
removes what a deleted job owned. Only objects owned by the job's uid are adopted or deleted."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from ..api import names, queue
from ..api import status as st
from ..api.owners import owned_by, owner_uids
from ..api.spec import job_spec
from ..decide.observed import Refusal
from ..decide.patch import Decision
from ..decide.refusal import CHILD_CONFLICT, POD_REJECTED
from .kube import ApiError, ChildConflict, Kube, collection

Obj = dict[str, Any]
log = logging.getLogger(__name__)
Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]


class PodRejected(Exception):
    """The API server refused to create a trainer pod (HTTP 403/422: a ResourceQuota,
    Pod Security or another admission check). Nothing else of the decision is applied;
    the pass decides again knowing it (`apply_pass`). `pod`: the refused pod's name."""

    def __init__(self, message: str, pod: str) -> None:
        super().__init__(message)
        self.pod = pod


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
    meta = pod["metadata"]
    try:
        created = kube.create(pod)
    except ApiError as err:
        if err.status not in (403, 422):
            raise
        # quota admission runs before the name is looked up: a pod created by an
        # earlier pass is refused by a full quota, not answered "exists"
        existing = kube.get(_path_of(pod))
        if existing is None:
            raise PodRejected(
                f"pod {meta['name']} was refused: {err.reason}", meta["name"]
            ) from err
        created = False
    if created:
        return
    existing = kube.get(_path_of(pod)) or {}
    if existing and not owned_by({**existing, "kind": "Pod"}, job):
        raise StaleGroup(f"pod {meta['name']} of another TuningJob of this name still exists")
    have = ((existing.get("metadata") or {}).get("labels") or {}).get(names.LABEL_ATTEMPT)
    if have is not None and have != meta["labels"][names.LABEL_ATTEMPT]:
        raise StaleGroup(f"pod {meta['name']} of pod group {have} still exists")


def ensure_child(kube: Kube, job: Obj, child: Obj, read_first: bool = False) -> Obj | None:
    """Create `child`: None if created, else the object of that name, which must be
    the job's own (ChildConflict otherwise: never adopt someone else's object).
    `read_first`: the child most likely exists (a pod group came before, and its
    children were created then), so it is read before any create: one request
    instead of a refused create and a read."""
    existing = kube.get(_path_of(child)) if read_first else None
    for _ in range(2):  # a create refused, then the object gone before the read: again
        if existing is not None:
            break
        if kube.create(child):
            return None
        existing = kube.get(_path_of(child))
    if existing is None:
        raise ApiError(409, "", "POST", _path_of(child))  # the pass fails; the next retries
    if not owned_by({**existing, "kind": child["kind"]}, job):
        owners = ", ".join(sorted(owner_uids(existing))) or "none"
        raise ChildConflict(
            f"{child['kind']} {child['metadata']['name']} exists and is not owned by this "
            f"TuningJob (owner uids: {owners}); delete or rename it"
        )
    return existing


def refresh_child(kube: Kube, child: Obj, field: str, existing: Obj, logger: Logger = log) -> None:
    """Replace (delete + create) the job's own `child` (`existing`: as read) when its
    `field` differs from the rendered one (decide.desired.REFRESHED). Only asked before
    a group's pods are created: no trainer mounts, reports to or acts under these
    objects then."""
    meta = child["metadata"]
    if (existing.get(field) or {}) == (child.get(field) or {}):
        return
    uid = (existing.get("metadata") or {}).get("uid")
    kube.delete(child["kind"], meta["namespace"], meta["name"], uid=uid)
    kube.create(child)
    logger.info("reset %s %s for the new pod group", child["kind"], meta["name"])


def apply(kube: Kube, job: Obj, decision: Decision, *, logger: Logger = log) -> Obj | None:
    """Carry out `decision` for `job`, its objects as rendered, in this order: children,
    pods, probes, the status patch (the commit point), Kueue releases, pod deletes,
    Events, the job's own deletion at its TTL. Returns the job as the status patch left
    it (None: no patch)."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    started = bool((job.get("status") or {}).get(st.START_TIME))  # a group came before
    for child in decision.children:
        existing = ensure_child(kube, job, child.obj, read_first=started)
        if existing is None:
            logger.info("created %s %s", child.obj["kind"], child.obj["metadata"]["name"])
        elif child.refresh is not None:
            refresh_child(kube, child.obj, child.refresh, existing, logger)
    for pod in decision.pods:
        create_pod(kube, job, pod)
    _create_probes(kube, job, decision.probes)
    patched = None
    if decision.status:
        rv = meta.get("resourceVersion")
        patched = kube.patch_status(namespace, name, decision.status, resource_version=rv)
        if kube.fence is not None:
            kube.fence.committed()  # accepted as current: carry out the rest (act.fence)
    _release_and_delete(kube, namespace, decision, logger)
    for event in decision.events:
        logger.info("%s %s: %s", event.type, event.reason, event.message)
        try:
            kube.post_event(job, event)
        except ApiError as err:  # an Event lost is not worth a retry of the decision
            logger.warning("could not post event %s: %s", event.reason, err)
    if decision.delete_job:
        # only this very job (uid): one deleted and re-created under the same name since
        # the pass read it is a new job, whose TTL has not begun
        logger.info("ttlSecondsAfterFinished passed: deleting the TuningJob")
        kube.delete(names.KIND, namespace, name, uid=meta.get("uid"))
    return patched


def _create_probes(kube: Kube, job: Obj, probes: list[Obj]) -> None:
    """Probe pods (decide.elastic): one refused, or still there from an older job, is
    only a probe, and the pass goes on."""
    for probe in probes:
        try:
            create_pod(kube, job, probe)
        except (PodRejected, StaleGroup) as err:
            meta = job["metadata"]
            log.warning("%s/%s: probe not created: %s", meta["namespace"], meta["name"], err)


def _release_and_delete(kube: Kube, namespace: str, decision: Decision, logger: Logger) -> None:
    """Kueue releases, then pod deletes (each that very pod: uid precondition)."""
    for ref in decision.release_pods:
        if kube.release_pod(namespace, ref.name, ref.uid):
            logger.info("released pod %s from its Kueue pod group", ref.name)
    for ref in decision.delete_pods:
        if kube.delete("Pod", namespace, ref.name, uid=ref.uid):
            logger.info("deleted pod %s (uid %s)", ref.name, ref.uid)


@dataclasses.dataclass(frozen=True)
class Applied:
    """A pass carried out: the decision applied, the job as its status patch left it
    (None: no patch), and whether the pass wrote pods or children (a refused first
    decision may have, even when the second writes nothing)."""

    decision: Decision
    job: Obj | None
    wrote_children: bool


def apply_pass(
    kube: Kube,
    job: Obj,
    decide: Callable[[Refusal | None], Decision],
    *,
    logger: Logger = log,
) -> Applied:
    """Decide and apply one pass. When the API server refuses what the decision creates
    (a pod: PodRejected; a child's name taken by an object the job does not own:
    ChildConflict), decide again knowing it (decide.refusal) and apply that: the
    refusal reaches status and Events the way everything else does."""
    decision = decide(None)
    wrote = decision.writes_children
    try:
        patched = apply(kube, job, decision, logger=logger)
    except (ChildConflict, PodRejected) as err:
        reason = CHILD_CONFLICT if isinstance(err, ChildConflict) else POD_REJECTED
        # the module's logger: kopf's per-object one would post it as an Event
        meta = job["metadata"]
        log.info("%s/%s: %s: %s", meta["namespace"], meta["name"], reason, err)
        decision = decide(Refusal(reason, str(err), getattr(err, "pod", None)))
        patched = apply(kube, job, decision, logger=logger)
    return Applied(decision, patched, wrote or decision.writes_children)


def _delete_owned(
    kube: Kube,
    job: Obj,
    kind: str,
    name: str,
    logger: Logger,
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


def cleanup(kube: Kube, job: Obj, logger: Logger = log) -> None:
    """On job deletion: pods and the service go at once (they are owned too, but the
    garbage collector may lag), released from Kueue's pod groups first (their quota is
    freed at once); the created claim only with reclaimPolicy Delete. Only
    objects owned by this job (its uid) are deleted: a job re-created under the same
    name, or a user's object that happens to have a child's name, is left alone."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    spec = job_spec(job)
    for pod in kube.list_pods(namespace, name):
        if owned_by({**pod, "kind": "Pod"}, job):
            pod_name, uid = pod["metadata"]["name"], pod["metadata"].get("uid")
            if queue.held(pod):  # else Kueue keeps the pod and its Workload's quota
                kube.release_pod(namespace, pod_name, uid)
            kube.delete("Pod", namespace, pod_name, uid=uid)
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
        claim = spec.checkpoint.existing_claim or names.pvc_name(name)
        logger.info("kept the checkpoint claim %s", claim)
