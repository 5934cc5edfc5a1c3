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
from bench.chaos.faults import (
    JOB_LABEL,
    LIST_SECONDS,
    Context,
    hit,
    live_pods,
    skip,
    through_outage,
)
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
    exits = ExitWatch(ctx.env.cluster.core, slot.namespace)
    path, capacity = claim
    provisioner.fill(path)
    try:
        exits.follow(planned.hold)
    finally:  # its capacity, not the size seen: another fill of it may overlap this one
        provisioner.unfill(path, capacity)
    exits.follow(TAIL_SECONDS)
    # an exit 75 the operator must count (unless someone else was deleting the pod)
    record.hits.extend(dataclasses.replace(hit(pod, EXIT_PREEMPTED), clean=not _deleting(pod))
                       for pod in exits.preempted.values())  # fmt: skip
    # gone while the watch was cut (an API server restart): ended how, nobody saw
    record.hits.extend(dataclasses.replace(hit(pod), clean=False) for pod in exits.unseen.values())
    record.detail = (f"{path.name} full for {planned.hold} s; {len(exits.preempted)} pod(s) "
                     f"exited 75, {len(exits.unseen)} ended unseen")  # fmt: skip


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


class ExitWatch:
    """The namespace's trainer pods whose trainer exited 75, from a listing on, by a
    watch that reconnects after a cut (an API server restart). A restarted API server
    may refuse to resume from the last version seen (410): the watch lists again, and
    a pod gone meanwhile without an exit seen is `unseen`, its end unknown."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.preempted: dict[str, Obj] = {}
        self.unseen: dict[str, Obj] = {}
        self.alive: dict[str, Obj] = {}
        self.version = through_outage(self._list, LIST_SECONDS)

    def follow(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self._watch(deadline, left)
            except client.ApiException as err:
                if err.status == 410:  # too old to resume from
                    self._relist()
                else:
                    time.sleep(1.0)
            except Exception:  # a cut stream: reconnect from the last version seen
                time.sleep(1.0)

    def _watch(self, deadline: float, left: float) -> None:
        stream = watch.Watch().stream(
            self.core.list_namespaced_pod, self.namespace, label_selector=JOB_LABEL,
            resource_version=self.version, timeout_seconds=max(1, int(left)),
        )  # fmt: skip
        with contextlib.closing(stream):
            for event in stream:
                pod = event["object"]
                self.version = pod.metadata.resource_version or self.version
                self._seen(self.core.api_client.sanitize_for_serialization(pod),
                           gone=event["type"] == "DELETED")  # fmt: skip
                if time.monotonic() >= deadline:
                    return

    def _seen(self, pod: Obj, gone: bool = False) -> None:
        uid = pod["metadata"]["uid"]
        if _exited_preempted(pod) and uid not in self.preempted:
            self.preempted[uid] = pod  # as it ended, before the operator deleted it
        if gone or _ended(pod):
            self.alive.pop(uid, None)
        elif not _ended(pod):
            self.alive[uid] = pod

    def _list(self) -> str:
        listing = self.core.list_namespaced_pod(self.namespace, label_selector=JOB_LABEL)
        pods = self.core.api_client.sanitize_for_serialization(listing.items)
        before, self.alive = self.alive, {}
        for pod in pods:
            self._seen(pod)
        now = {p["metadata"]["uid"] for p in pods}
        self.unseen.update((uid, p) for uid, p in before.items()
                           if uid not in now and uid not in self.preempted)  # fmt: skip
        return str(listing.metadata.resource_version)

    def _relist(self) -> None:
        with contextlib.suppress(Exception):  # not served yet: the next pass tries again
            self.version = self._list()
            return
        time.sleep(1.0)


def _deleting(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _terminated(pod: Obj) -> list[Obj]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return [(c.get("state") or {}).get("terminated") or {} for c in statuses]


def _exited_preempted(pod: Obj) -> bool:
    return any(t.get("exitCode") == EXIT_PREEMPTED for t in _terminated(pod))


def _ended(pod: Obj) -> bool:
    """Every container of the pod has ended (or the pod is finished)."""
    ends = _terminated(pod)
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed") or (bool(ends) and all(ends))
