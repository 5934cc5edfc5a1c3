"""Elastic shapes (`spec.distribution.elastic`): a sequential job's trainer group that
stays unschedulable - the scheduler finds no node for one of its pods, or Kueue keeps it
queued - for `waitSeconds` since it was created is recreated in the next shape of the
list, down to the last, which waits as any group does (Stalled after
pendingTimeoutSeconds). Nothing is lost: the group never started, and the trainer
resumes the search from the checkpoint volume on any number of replicas with the same
global batch and data order (docs/design/trainer.md, elastic resume).

Back up: once a smaller shape's trainers have run `waitSeconds`, probes of the job's own
shape are created (pods that mount nothing and sleep; render.trainer_pods.build_probe):
the own shape anywhere, and beside the running group (the GPUs it lacks; _wanted_probes).
They wait in the scheduler's queue like any pod; once every pod of either set is
scheduled the own shape fits, and the probes hold those GPUs while the trainer group is
deleted - its trainer checkpoints on SIGTERM and exits, so the move happens at a
checkpoint and loses no step - and the group is recreated in the own shape; the probes
are deleted at that moment to hand their GPUs over. A job queued by Kueue probes through
Kueue: a one-pod probe beside its group is a Kueue pod group of its own, admitted only
when the queue has the GPUs the own shape needs beyond the running group's, and
released when it goes.

status.shape says which shape is in use (the pods are rendered from it: api.spec.job_spec),
with a `ShapeChanged` Event at every change. Not a restart, a failure or a preemption:
no counter moves. A new shape is a new pod group (attempt + 1); under Kueue that is a
new pod group name, so a new Workload, and the old one is released with its pods."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tuneop_contract.spec import JobSpec

from ..api import names
from ..api import status as st
from ..api.queue import QUEUED, queue_name
from .classify import UNSCHEDULABLE, classify, trainer_started_at
from .classify import alive as is_alive
from .job import delete_alive, release_held, stop_group
from .job_groups import JobGroups
from .patch import Draft
from .slot import OLD_PODS_TERMINATING, GroupResult, Slot
from .stall import idle_seconds

Obj = dict[str, Any]

SHAPE_CHANGED = "ShapeChanged"
WAITING = (UNSCHEDULABLE, QUEUED)
"""What a group waits for that a smaller shape may not: a node with room, or quota."""


def shape_status(spec: JobSpec) -> Obj:
    dist = spec.distribution
    shape = dist.shape
    return {
        "index": dist.shape_index,
        "name": shape.name,
        "workers": shape.workers,
        "gpusPerWorker": shape.gpus_per_worker,
        "gpus": shape.workers * shape.gpus_per_worker,
    }


def follow_shape(draft: Draft, groups: JobGroups, results: dict[str, GroupResult]) -> None:
    """Record the shape in use; recreate a group that waited `waitSeconds` in the next
    shape (its result becomes "recreate"), or requeue the pass for when it will have."""
    spec = draft.spec
    dist = spec.distribution
    if dist.elastic is None or groups.parallel:
        return
    if draft.get(st.SHAPE) is None:
        draft.put(st.SHAPE, shape_status(spec))
    slot = groups.slots[0]
    result = results.get(slot.group.name)
    following = dist.shape_index + 1
    if result is None or result.kind != "pending" or result.reason not in WAITING:
        return
    if following >= len(dist.shapes):
        return  # the last shape waits, as a job without elastic shapes does
    waited = idle_seconds(draft, None, slot.get(st.START_TIME)) or 0.0
    if waited < dist.elastic.wait_seconds:
        left = dist.elastic.wait_seconds - waited
        draft.decision.wake_within(left)
        return
    smaller = spec.at_shape(following)
    stop_group(draft, groups.current[slot.group.name], slot.gpus_per_pod)
    message = (
        f"{slot.label} pod group {slot.attempt} ({dist.shape.name}) {result.reason} for "
        f"{int(waited)}s (elastic.waitSeconds={dist.elastic.wait_seconds}); recreating it "
        f"as {smaller.distribution.shape.name}, elastic shape {following} of "
        f"{len(dist.shapes) - 1}: {result.message}"
    )
    slot.recreate()
    draft.put(st.SHAPE, shape_status(smaller))
    draft.event("Warning", SHAPE_CHANGED, message[:1024])
    summary = f"recreating the {slot.label} pod group as {smaller.distribution.shape.name}"
    results[slot.group.name] = GroupResult("recreate", SHAPE_CHANGED, message, summary)


def follow_probe(draft: Draft, groups: JobGroups, results: dict[str, GroupResult]) -> None:
    """In a smaller shape: keep probes of the own shape; once every pod of one of their
    sets is scheduled, recreate the trainer group in the own shape (its result becomes
    "recreate")."""
    spec = draft.spec
    dist = spec.distribution
    if dist.elastic is None or groups.parallel:
        return
    slot = groups.slots[0]
    result = results.get(slot.group.name)
    if dist.shape_index == 0:
        # Moved up: the probe holds the GPUs until the own shape's pods exist (the
        # pass that creates them deletes it, after them).
        held = result is not None and result.reason == OLD_PODS_TERMINATING
        groups.keep_probes = held and bool(groups.probes)
        return
    if result is None or result.kind != "running":
        return
    ran = _running_seconds(draft, groups.current[slot.group.name].values())
    if ran < dist.elastic.wait_seconds:
        left = dist.elastic.wait_seconds - ran
        draft.decision.wake_within(left)
        return
    groups.keep_probes = True
    wanted, sets = _wanted_probes(draft, groups.current[slot.group.name])
    gone = [  # evicted, failed (made again) or no longer wanted
        p for p in groups.probes if classify(p).ended or p["metadata"]["name"] not in wanted
    ]
    delete_alive(draft, gone)
    alive = {p["metadata"]["name"]: p for p in groups.probes if is_alive(p) and p not in gone}
    # whatever is not kept, deleted by anyone, goes from Kueue too: its quota is handed on
    release_held(draft, groups.probes, set(alive), stopping=False)
    missing = [probe for name, probe in wanted.items() if name not in alive]
    if missing:
        draft.decision.create_probes = missing
    bound = {
        name: str(alive[name]["spec"].get("nodeName") or "") for name in wanted if name in alive
    }
    fits = next((probes for probes in sets if all(bound.get(n) for n in probes)), None)
    if fits:
        _move_up(draft, slot, groups, results, sorted({bound[n] for n in fits}))


def _running_seconds(draft: Draft, pods: Iterable[Obj]) -> float:
    """How long every trainer of the group has been running (0 until each has started):
    a group that waited for its nodes or images has not yet shown that it runs."""
    started = [st.parse_time(trainer_started_at(p)) for p in pods]
    if not started or not all(started):
        return 0.0
    return (draft.now - max(t for t in started if t)).total_seconds()


def drop_probes(draft: Draft, probes: list[Obj]) -> None:
    """Delete probes; a queued job's are also released from Kueue, so their Workload
    finishes and hands its quota on."""
    delete_alive(draft, probes)
    release_held(draft, probes, set(), stopping=True)


def _wanted_probes(
    draft: Draft, pods: dict[str, Obj]
) -> tuple[dict[str, tuple[int, str]], list[list[str]]]:
    """The probe pods to keep, by name, and the sets of them any one of which, all
    scheduled, says the own shape fits:

    - beside the running pods (first: it fits where the job runs): for each own pod i
      that running pod i can hand its node to, the GPUs it needs beyond that pod's
      (`-probe-here[-i]`, pinned there); each own pod beyond the running ones anywhere;
    - the own shape anywhere: `<job>-probe-<i>` for each of its pods; not when the first
      set pins nothing (it is then a part of this one, which would take its GPUs).

    A job queued by Kueue has only the first, and only as one pod: Kueue admits it with
    the quota the own shape needs beyond the running group's, while the own shape's
    probe would need all of it on top, and a probe of several pods (each its own Kueue
    pod group) could be admitted piece by piece."""
    spec = draft.spec
    dist = spec.distribution
    own = dist.shapes[0]
    job = draft.seen.name
    nodes = {
        int((p["metadata"].get("labels") or {}).get(names.LABEL_WORKER_INDEX) or 0): str(
            p["spec"].get("nodeName") or ""
        )
        for p in pods.values()
    }
    extra = own.gpus_per_worker - dist.gpus_per_worker
    workers = range(min(dist.workers, own.workers) if extra > 0 else 0)
    anywhere = {names.probe_pod_name(job, i): (i, "") for i in range(own.workers)}
    beside = {
        names.probe_pod_name(job, names.beside(w)): (names.beside(w), nodes.get(w, ""))
        for w in workers
    }
    beside.update({n: anywhere[n] for n in list(anywhere)[dist.workers :]})
    if not all(node or index >= 0 for index, node in beside.values()):
        beside = {}  # a running pod not bound yet: nothing to stand beside
    elif beside and all(index >= 0 for index, _ in beside.values()):
        anywhere = {}  # a part of the own shape anywhere: its whole would only compete
    if queue_name(draft.seen.job):
        anywhere = {}
        beside = beside if len(beside) == 1 else {}
    sets = [list(probes) for probes in (beside, anywhere) if probes]
    return {**anywhere, **beside}, sets


def _move_up(
    draft: Draft,
    slot: Slot,
    groups: JobGroups,
    results: dict[str, GroupResult],
    nodes: list[str],
) -> None:
    spec = draft.spec
    dist = spec.distribution
    own = dist.shapes[0]
    pods = groups.current[slot.group.name]
    stop_group(draft, pods, slot.gpus_per_pod)
    draft.decision.create_probes = []
    message = (
        f"the job's own shape {own.name} fits again (its probe was scheduled on "
        f"{', '.join(nodes)}); recreating the {slot.label} pod group {slot.attempt} "
        f"({dist.shape.name}) as {own.name}: its trainer checkpoints on SIGTERM first"
    )
    slot.recreate()
    draft.put(st.SHAPE, shape_status(spec.at_shape(0)))
    draft.event("Normal", SHAPE_CHANGED, message[:1024])
    summary = f"recreating the {slot.label} pod group as {own.name}"
    results[slot.group.name] = GroupResult("recreate", SHAPE_CHANGED, message, summary)
