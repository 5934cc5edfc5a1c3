"""The claim-full fault: a job's checkpoint claim runs out of room while its trainer
writes, and gets it back `hold` s later.

The soak's jobs ask for their claims from a StorageClass whose volumes are tmpfs mounts
of the claim's size (tests/localcluster/nodeagent/provisioner.py, `sized_class`): the
fault remounts the job's tmpfs down to what it holds, so the next write of a checkpoint,
of results.json or of the progress record fails with ENOSPC, as on a full disk. The
trainer exits 75 with its one-line message (checkpoint/volume.py: nothing was lost), the
operator counts a preemption and starts a new pod group, which may end the same way
while the claim is still full. Each pod group that ended with exit 75 while the fault
held (or just after: a write in flight) is a hit the operator must count."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from tuneop_contract import EXIT_PREEMPTED

from bench.chaos import schedule as s
from bench.chaos.faults import JOB_LABEL, Context, hit, live_pods, skip
from bench.chaos.jobkinds import STORAGE_CLASS
from bench.chaos.ledger import FaultRecord
from tests.localcluster.nodeagent import provisioner

Obj = dict[str, Any]
TAIL_SECONDS = 20.0
"""After the claim has room again, how long a write that failed just before may take to
end its pod (the trainer's report, then its exit)."""


def claim_full(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    slot = ctx.slots[planned.slot]
    if not live_pods(ctx, record, slot):
        return
    claim = claim_path(ctx, slot.namespace)
    if claim is None:
        skip(record, "its claim is not a tmpfs of the soak's StorageClass")
        return
    core = ctx.env.cluster.core
    since = _resource_version(core, slot.namespace)
    path, capacity = claim
    provisioner.fill(path)
    try:
        ended = _preempted_pods(core, slot.namespace, since, planned.hold)
    finally:  # its capacity, not the size seen: another fill of it may overlap this one
        provisioner.unfill(path, capacity)
    ended.update(_preempted_pods(core, slot.namespace, since, TAIL_SECONDS, ended))
    # an exit 75 the operator must count (unless someone else was deleting the pod)
    record.hits.extend(dataclasses.replace(hit(pod, EXIT_PREEMPTED), clean=not _deleting(pod))
                       for pod in ended.values())  # fmt: skip
    record.detail = f"{path.name} full for {planned.hold} s; {len(ended)} pod(s) exited 75"


def claim_path(ctx: Context, namespace: str) -> tuple[Path, int] | None:
    """The tmpfs behind the job's checkpoint claim and its capacity in bytes, or None
    (not bound, not sized)."""
    for pvc in ctx.env.cluster.core.list_namespaced_persistent_volume_claim(namespace).items:
        if pvc.spec.storage_class_name != STORAGE_CLASS or not pvc.spec.volume_name:
            continue
        pv = ctx.env.cluster.core.read_persistent_volume(pvc.spec.volume_name)
        path = Path(pv.spec.local.path) if pv.spec.local else None
        if path is not None and path.is_mount():
            return path, provisioner.size_bytes(pv.spec.capacity["storage"])
    return None


def _resource_version(core: client.CoreV1Api, namespace: str) -> str:
    listing = core.list_namespaced_pod(namespace, label_selector=JOB_LABEL, limit=1)
    return str(listing.metadata.resource_version)


def _preempted_pods(
    core: client.CoreV1Api,
    namespace: str,
    since: str,
    seconds: float,
    seen: dict[str, Obj] | None = None,
) -> dict[str, Obj]:
    """uid → pod (as a dict) of the namespace's trainer pods whose trainer exited 75,
    watched from resourceVersion `since` for `seconds` (reconnecting after a cut watch:
    an API server restart; a 410 ends it)."""
    found: dict[str, Obj] = dict(seen or {})
    deadline = time.monotonic() + seconds
    version = since
    while (left := deadline - time.monotonic()) > 0:
        try:
            stream = watch.Watch().stream(
                core.list_namespaced_pod, namespace, label_selector=JOB_LABEL,
                resource_version=version, timeout_seconds=max(1, int(left)),
            )  # fmt: skip
            with contextlib.closing(stream):
                for event in stream:
                    pod = event["object"]
                    version = pod.metadata.resource_version or version
                    if _exited_preempted(pod) and pod.metadata.uid not in found:
                        # as it ended, before the operator deleted it
                        found[pod.metadata.uid] = core.api_client.sanitize_for_serialization(pod)
                    if time.monotonic() >= deadline:
                        break
        except client.ApiException as err:
            if err.status == 410:  # too old to resume from: what was seen is all
                break
            time.sleep(1.0)
        except Exception:  # a cut stream (an API server restart): reconnect from `version`
            time.sleep(1.0)
    return found


def _deleting(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _exited_preempted(pod: Any) -> bool:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    return any(
        c.state and c.state.terminated and c.state.terminated.exit_code == EXIT_PREEMPTED
        for c in statuses
    )
