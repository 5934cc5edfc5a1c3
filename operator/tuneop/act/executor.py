"""The operator's side effects: `apply` carries out a reconcile Decision in a crash-safe
order (create children and pods, 409 = exists and must be ours; patch status; release
and delete pods; post Events; delete the job at its TTL), `apply_pass` decides and
applies one pass (deciding again when the API server refuses the pods), and `cleanup`
removes what a deleted job owned. Only objects owned by the job's uid are adopted or deleted."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import tuneop_contract as contract
from tuneop_contract.spec import JobSpec

from ..api import names, queue
from ..api.groups import group_named
from ..api.owners import owned_by, owner_uids
from ..api.spec import job_spec
from ..decide.patch import Decision, Refusal
from ..decide.refusal import CHILD_CONFLICT, POD_REJECTED
from ..render import children, trainer_pods
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


def ensure_child(kube: Kube, job: Obj, child: Obj) -> bool:
    """Create `child`; True if created. If the name is taken the object must be the
    job's own (ChildConflict otherwise: never adopt someone else's object)."""
    if kube.create(child):
        return True
    existing = kube.get(_path_of(child))
    if existing is not None and not owned_by({**existing, "kind": child["kind"]}, job):
        owners = ", ".join(sorted(owner_uids(existing))) or "none"
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
    logger: Logger = log,
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
    logger: Logger = log,
    spec: JobSpec | None = None,
    progress_interval: float = contract.DEFAULT_PROGRESS_INTERVAL_SECONDS,
) -> Obj | None:
    """Carry out `decision` for `job` (`spec`: its parsed spec, parsed here when not
    given), in this order: children, pods, the status patch (the commit point), Kueue
    releases, pod deletes, Events, the job's own deletion at its TTL. Returns the job as
    the status patch left it (None: no patch)."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    spec = spec or job_spec(job)
    if decision.ensure_children:
        _ensure_children(kube, job, spec, decision.reset_progress, logger)
    pods = {"metrics_port": metrics_port, "uid": uid, "progress_interval": progress_interval}
    _create_pods(kube, job, spec, decision, pods)
    patched = None
    if decision.status:
        rv = meta.get("resourceVersion")
        patched = kube.patch_status(namespace, name, decision.status, resource_version=rv)
        if kube.fence is not None:
            kube.fence.committed()  # accepted as current: carry out the rest (act.fence)
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
        # only this very job (uid): one deleted and re-created under the same name since
        # the pass read it is a new job, whose TTL has not begun
        logger.info("ttlSecondsAfterFinished passed: deleting the TuningJob")
        kube.delete(names.KIND, namespace, name, uid=meta.get("uid"))
    return patched


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
    metrics_port: int,
    uid: int,
    logger: Logger = log,
    spec: JobSpec | None = None,
    progress_interval: float = contract.DEFAULT_PROGRESS_INTERVAL_SECONDS,
) -> Applied:
    """Decide and apply one pass. When the API server refuses what the decision creates
    (a pod: PodRejected; a child's name taken by an object the job does not own:
    ChildConflict), decide again knowing it (decide.refusal) and apply that: the
    refusal reaches status and Events the way everything else does."""
    decision = decide(None)
    options: dict[str, Any] = {
        "metrics_port": metrics_port, "uid": uid, "logger": logger, "spec": spec,
        "progress_interval": progress_interval,
    }  # fmt: skip
    wrote = decision.writes_children
    try:
        patched = apply(kube, job, decision, **options)
    except (ChildConflict, PodRejected) as err:
        reason = CHILD_CONFLICT if isinstance(err, ChildConflict) else POD_REJECTED
        # the module's logger: kopf's per-object one would post it as an Event
        meta = job["metadata"]
        log.info("%s/%s: %s: %s", meta["namespace"], meta["name"], reason, err)
        decision = decide(Refusal(reason, str(err), getattr(err, "pod", None)))
        patched = apply(kube, job, decision, **options)
    return Applied(decision, patched, wrote or decision.writes_children)


def _ensure_children(
    kube: Kube, job: Obj, spec: JobSpec, reset_progress: bool, logger: Logger
) -> None:
    """Every child a pod group needs, created if absent; the REFRESHED ones replaced
    when they differ from what this spec builds (the progress map only with
    `reset_progress`)."""
    progress_map = names.progress_configmap_name(job["metadata"]["name"])
    for child in children.build_children(job, spec):
        if ensure_child(kube, job, child):
            logger.info("created %s %s", child["kind"], child["metadata"]["name"])
        elif child["kind"] in REFRESHED and (
            reset_progress or child["metadata"]["name"] != progress_map
        ):
            refresh_child(kube, child, logger)


def _create_pods(kube: Kube, job: Obj, spec: JobSpec, decision: Decision, pods: Obj) -> None:
    """The sequential group's pods and each parallel group's the decision creates
    (`pods`: build_pod's settings from the operator's config). The pods see the status
    this decision writes (status.oomTrials -> their env)."""
    updated = {**job, "status": decision.merged_status(job)}
    for index in decision.create_pods:
        pod = trainer_pods.build_pod(updated, spec, index, decision.create_attempt, **pods)
        create_pod(kube, job, pod)
    for index, node in decision.create_probes:
        probe = trainer_pods.build_probe(job, spec, index, node, **pods)
        try:
            create_pod(kube, job, probe)
        except (PodRejected, StaleGroup) as err:  # only a probe: the pass goes on
            meta = job["metadata"]
            log.warning("%s/%s: probe not created: %s", meta["namespace"], meta["name"], err)
    for group_name, attempt in decision.create_groups:
        group = group_named(job["metadata"]["name"], spec, group_name)
        if group is None:  # the decision was made from this very spec
            continue
        for index in range(len(group.pod_names)):
            pod = trainer_pods.build_pod(updated, spec, index, attempt, group=group, **pods)
            create_pod(kube, job, pod)


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
        logger.info("kept the checkpoint claim %s", children.claim_name(job, spec))
