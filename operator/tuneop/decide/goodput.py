"""GPU time: what a job was given, what preemption cost it, how long recovery took.

All from what the operator sees (pods' own timestamps and the trainer's progress
record), in `status.goodput`, written in the same status patch as the decisions they
follow (so each ended pod group is added once):

- `allocatedGpuSeconds`: Σ over trainer pods of GPUs x (the pod's `status.startTime`,
  when the kubelet accepted it and the device plugin handed it its GPUs, to the end of
  its trainer container, or now while it runs). Pods that never started count nothing.
- `lostGpuSeconds`: Σ over preemptions of the group's GPUs x (the first training step of
  the replacement - the group's last checkpoint before the loss): the work since that
  checkpoint, which is redone, plus the time until training resumed (termination,
  rescheduling, start-up, restore). A SIGTERM-ed trainer checkpoints on the way out, so
  its redone part is near zero; a SIGKILL-ed one loses up to the checkpoint interval.
- `percent`: 100 x (1 - lost / allocated): the share of GPU time not lost to preemption.
  What any run pays anyway (the first start-up, checkpoint writes, validation) is not
  counted as lost; `make bench` measures those.
- `recoveries`, `lastRecoverySeconds`: pod lost → next training step, per preemption;
  each is also observed in the operator's `tuneop_recovery_seconds` histogram by reason.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from ..api import status as st
from ..api.progress import ProgressView

Obj = dict[str, Any]

FIELDS = (st.GOODPUT_ALLOCATED, st.GOODPUT_LOST)


def pod_gpu_seconds(pod: Obj, gpus: int, now: dt.datetime) -> float:
    """GPUs x the seconds the pod has held them."""
    if gpus <= 0:
        return 0.0
    status = pod.get("status") or {}
    start = st.parse_time(status.get("startTime"))
    if start is None:
        return 0.0
    end = now
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        finished = st.parse_time(terminated.get("finishedAt"))
        if finished is not None:
            end = min(end, finished)
    return max(0.0, (end - start).total_seconds()) * gpus


def group_gpu_seconds(pods: Iterable[Obj], gpus: int, now: dt.datetime) -> float:
    return sum(pod_gpu_seconds(p, gpus, now) for p in pods)


def trained_since_restore(progress: ProgressView) -> bool:
    """The record shows a training step of this trainer: past the step it resumed at,
    or (no restore) past step 0 of a trial."""
    if progress.empty or progress.text("phase") != "Running":
        return False
    step, epoch = progress.count("step") or 0, progress.count("epoch") or 0
    resumed = progress.count("resumedFromStep")
    if resumed is None:
        return step > 0
    return (epoch, step) != (progress.count("resumedFromEpoch") or 0, resumed)


def percent(allocated: float, lost: float) -> float | None:
    if allocated <= 0:
        return None
    return round(100.0 * max(0.0, 1.0 - lost / allocated), 1)


REFRESH_SECONDS = 120.0
"""The running pods' share is refreshed by a pass of its own once it is this old (a
status patch per pass per job would load the API server for nothing)."""
RIDE_SECONDS = 30.0
"""A pass that patches status anyway (a progress report) refreshes the share once it is
this old. A job reporting progress every interval (60 s by default, every interval at
most REFRESH_SECONDS / 2 apart for a refresh to ride on each) then pays one status
patch a report instead of a report's and a refresh's: at 1,000 training jobs, 17 patches
a second instead of 36."""


class Ledger:
    """status.goodput of one pass: ended groups added, disruptions noted, recoveries
    measured, the pods that go on holding GPUs kept (`live`); `finish` says what to
    write into status and when the running pods' share is due again."""

    def __init__(self, old: Any, now: dt.datetime) -> None:
        self.now = now
        self.values: Obj = (
            {k: v for k, v in old.items() if v is not None} if isinstance(old, dict) else {}
        )
        self.pending: Obj = dict(self.values.get(st.GOODPUT_PENDING) or {})
        self.changed = False
        self.recoveries: list[tuple[str, float]] = []
        self.live: list[tuple[Obj, int]] = []
        """Pods of started groups that hold GPUs after this pass, with their GPUs each."""
        self.due: float | None = None
        """Set by `finish`: seconds until the running pods' share is to be refreshed."""

    def _add(self, key: str, amount: float) -> None:
        if amount:
            self.values[key] = round(float(self.values.get(key) or 0.0) + amount, 3)
            self.changed = True

    def close(self, pods: Iterable[Obj], gpus_per_pod: int) -> None:
        """A pod group ended (preempted, failed, completed, replaced): its GPU time."""
        self._add(st.GOODPUT_ENDED, group_gpu_seconds(pods, gpus_per_pod, self.now))

    def holding(self, pods: Iterable[Obj], gpus_per_pod: int) -> None:
        """A group goes on holding its GPUs (the running pods' share)."""
        self.live.extend((pod, gpus_per_pod) for pod in pods)

    def stopped(self, pods: list[Obj], gpus_per_pod: int) -> None:
        """The operator stops a group (another shape, a stall): its GPU time ends and is
        no longer counted as held."""
        self.close(pods, gpus_per_pod)
        self.live = [(p, g) for p, g in self.live if p not in pods]

    def disrupted(self, group: str, last_checkpoint: Any, reason: str, gpus: int) -> None:
        """A preemption of `group`: its work since `last_checkpoint` will be redone."""
        if gpus <= 0:
            return
        since = st.parse_time(last_checkpoint) or self.now
        self.pending[group or "trainer"] = {
            "since": st.rfc3339(min(since, self.now)),
            "at": st.rfc3339(self.now),
            "reason": reason,
            "gpus": gpus,
        }
        self.changed = True

    def progressed(self, group: str, progress: ProgressView) -> None:
        """The replacement trained a step: the loss is over."""
        pending = self.pending.get(group or "trainer")
        if not isinstance(pending, dict) or not trained_since_restore(progress):
            return
        when = st.parse_time(progress.text("lastProgressTime"))
        at = st.parse_time(pending.get("at"))
        if when is None or at is None or when < at:
            return  # the lost group's last record, not the replacement's
        since = st.parse_time(pending.get("since")) or when
        gpus = int(pending.get("gpus") or 0)
        self._add(st.GOODPUT_LOST, max(0.0, (when - since).total_seconds()) * gpus)
        seconds = max(0.0, (when - at).total_seconds())
        self.values[st.GOODPUT_RECOVERIES] = int(self.values.get(st.GOODPUT_RECOVERIES) or 0) + 1
        self.values[st.GOODPUT_LAST_RECOVERY] = round(seconds, 1)
        self.recoveries.append((str(pending.get("reason") or "Preempted"), seconds))
        self.pending.pop(group or "trainer")
        self.changed = True

    def finish(self, patching: bool = False) -> Obj | None:
        """status.goodput to write (closed part + the running pods' share) if anything
        changed, REFRESH_SECONDS passed, or RIDE_SECONDS passed and the pass patches
        status anyway (`patching`); None: nothing to write. `due` says when the share is
        to be refreshed while pods hold GPUs."""
        updated = st.parse_time(self.values.get(st.GOODPUT_UPDATED))
        age = None if updated is None else (self.now - updated).total_seconds()
        due_after = RIDE_SECONDS if patching else REFRESH_SECONDS
        live = sum(pod_gpu_seconds(pod, gpus, self.now) for pod, gpus in self.live)
        writes = self.changed or ((age is None or age >= due_after) and live > 0)
        if live > 0:  # the running pods' share grows: refreshed when it is due
            self.due = REFRESH_SECONDS - (0.0 if writes or age is None else age)
        if not writes:
            return None
        ended = float(self.values.get(st.GOODPUT_ENDED) or 0.0)
        lost = float(self.values.get(st.GOODPUT_LOST) or 0.0)
        allocated = ended + live
        self.values[st.GOODPUT_ALLOCATED] = round(allocated, 1)
        share = percent(allocated, lost)
        if share is not None:
            self.values[st.GOODPUT_PERCENT] = share
        self.values[st.GOODPUT_UPDATED] = st.rfc3339(self.now)
        # a merge patch: a key is removed by sending null
        self.values[st.GOODPUT_PENDING] = self.pending or None
        return self.values
