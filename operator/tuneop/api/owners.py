"""Which objects are a TuningJob's own: its children name the job's uid in their owner
references (a retained checkpoint claim, which must outlive the job, has no owner and
is recognised by the job's labels). Nothing else is adopted, classified or deleted."""

from __future__ import annotations

from typing import Any

from . import names

Obj = dict[str, Any]


def owner_reference(job: Obj) -> Obj:
    """The owner reference every child of `job` carries (the garbage collector deletes
    the child with the job)."""
    meta = job["metadata"]
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_uids(obj: Obj) -> set[str]:
    """The uids of the TuningJobs among `obj`'s owners."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(r.get("uid")) for r in refs if r.get("kind") == names.KIND and r.get("uid")}


def owned_by(obj: Obj, job: Obj) -> bool:
    """`obj` is this job's: it names the job's uid among its owners, or (a retained
    checkpoint claim, which has no owner) it has no owner and the job's labels."""
    meta = obj.get("metadata") or {}
    uids = owner_uids(obj)
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


def foreign(pod: Obj, job: Obj) -> bool:
    """A pod with the job's labels owned by another TuningJob: an older job of the same
    name, deleted, whose pods are still terminating. Waited for, never adopted or
    deleted."""
    uids = owner_uids(pod)
    return bool(uids) and str(job["metadata"].get("uid")) not in uids
