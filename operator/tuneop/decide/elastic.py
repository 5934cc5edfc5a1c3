"""Elastic shapes (`spec.distribution.elastic`): a sequential job's trainer group that
stays unschedulable - the scheduler finds no node for one of its pods, or Kueue keeps it
queued - for `waitSeconds` since it was created is recreated in the next shape of the
list, down to the last, which waits as any group does (Stalled after
pendingTimeoutSeconds). Nothing is lost: the group never started, and the trainer
resumes the search from the checkpoint volume on any number of replicas with the same
global batch and data order (docs/design/trainer.md, elastic resume).

status.shape says which shape is in use (the pods are rendered from it: api.spec.job_spec),
with a `ShapeChanged` Event at every change. Not a restart, a failure or a preemption:
no counter moves. A new shape is a new pod group (attempt + 1); under Kueue that is a
new pod group name, so a new Workload, and the old one is released with its pods."""

from __future__ import annotations

from typing import Any

from ..api import status as st
from ..api.queue import QUEUED
from ..api.spec import JobSpec
from .classify import UNSCHEDULABLE
from .job import delete_alive
from .job_groups import JobGroups
from .patch import Draft
from .slot import GroupResult
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


def follow_shape(
    draft: Draft, spec: JobSpec, groups: JobGroups, results: dict[str, GroupResult]
) -> None:
    """Record the shape in use; recreate a group that waited `waitSeconds` in the next
    shape (its result becomes "recreate"), or requeue the pass for when it will have."""
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
        draft.decision.requeue_after = min(draft.decision.requeue_after or left, left)
        return
    smaller = spec.at_shape(following)
    delete_alive(draft, list(groups.current[slot.group.name].values()))
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
