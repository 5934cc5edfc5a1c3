"""A job's pod groups as one pass sees them (`JobGroups`): each group's bookkeeping
(decide.slot), what its trainer last reported, and the job's pods sorted by what the
pass does with them. A sequential job has one group, its trainer, whose bookkeeping and
record are the top level of status; a job with parallel trials has the oracle and trial
groups t0..t<N-1>, each with its `status.groups` entry and its own record under its tuner
id in the progress ConfigMap, the oracle's record being the job's."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..api import names
from ..api import status as st
from ..api.groups import pod_groups, sequential_group
from ..api.owners import foreign
from ..api.progress import ProgressView
from ..api.progress import from_configmap as progress_from_configmap
from .job import apply_progress, copy_progress, delete_alive, release_held
from .patch import Draft
from .slot import Slot

Obj = dict[str, Any]

REPORTED = (
    st.GROUP_TRIAL_ID,
    st.GROUP_EPOCH,
    st.GROUP_STEP,
    st.LAST_PROGRESS_TIME,
    st.LAST_CHECKPOINT_TIME,
)
"""What a parallel group's entry shows of its trainer's last record (the record's fields
of the same names)."""


@dataclasses.dataclass
class JobGroups:
    """The job's pod groups in one pass."""

    slots: list[Slot]
    """A sequential job's one group; else the oracle first, then the trial groups."""
    progress: dict[str, ProgressView]
    """Each group's own record, by group name."""
    pods: list[Obj]
    """The job's own pods (not those of an earlier job of the same name)."""
    others: list[Obj]
    """Pods of an earlier TuningJob of the same name, still terminating."""
    current: dict[str, dict[str, Obj]]
    """Each group's pods of its current attempt, by group name and pod name."""
    stale: list[Obj]
    """The job's pods of no group's current attempt."""
    every_current: list[Obj]
    """The pods of every group's current attempt as read (kept when a reopened job's
    groups start afresh)."""
    probes: list[Obj] = dataclasses.field(default_factory=list)
    """The probe pods of the job's own shape (decide.elastic), apart from the groups."""
    keep_probes: bool = False
    """Set by decide.elastic when the probe is still wanted; else it is deleted."""

    @property
    def parallel(self) -> bool:
        return self.slots[0].entry is not None

    @property
    def trial_slots(self) -> list[Slot]:
        return [s for s in self.slots if not s.group.oracle]

    @property
    def final_slot(self) -> Slot:
        """The group whose trainer runs the post-search work and reports the final
        summary (a sequential job's trainer, t0 of parallel trials)."""
        return self.trial_slots[0]

    def stale_of(self, slot: Slot) -> list[Obj]:
        """The stale pods a group waits for before it starts: those under its pod names
        (a sequential job's one group waits for every stale pod of the job)."""
        if not self.parallel:
            return self.stale
        return [p for p in self.stale if p["metadata"]["name"] in slot.group.pod_names]

    def write_entries(self, draft: Draft) -> None:
        """A parallel job's group entries into `status.groups`."""
        if self.parallel:
            draft.put(st.GROUPS, [s.entry for s in self.slots])


def read_groups(draft: Draft) -> JobGroups:
    """The job's groups with their trainers' records copied into status, and its pods
    sorted: pods of no current attempt deleted, the Kueue pod groups the operator is
    done with released."""
    seen = draft.seen
    spec, job_name, progress_configmap = seen.spec, seen.name, seen.progress
    if spec.parallel:
        entries = _entries(draft)
        slots = [Slot(draft, g, entries[g.name]) for g in pod_groups(job_name, spec)]
        progress = _read_parallel_progress(draft, slots, progress_configmap)
    else:
        slots = [Slot(draft, sequential_group(job_name, spec))]
        record = copy_progress(draft, progress_configmap)
        draft.decision.ignored = record.ignored
        apply_progress(draft, record)
        progress = {slots[0].group.name: record}
    job = seen.job
    probes = [p for p in seen.pods if names.is_probe(p) and not foreign(p, job)]
    pods = [p for p in seen.pods if not names.is_probe(p)]
    others = [p for p in pods if foreign(p, job)]
    pods = [p for p in pods if not foreign(p, job)]
    current = {s.group.name: s.current_pods(pods) for s in slots}
    alive_names = {n for group in current.values() for n in group}
    stale = [p for p in pods if p["metadata"]["name"] not in alive_names]
    delete_alive(draft, stale)
    stopping = draft.get(st.PHASE) in st.TERMINAL_PHASES or spec.suspend
    release_held(draft, pods, alive_names, stopping)
    every_current = [p for group in current.values() for p in group.values()]
    return JobGroups(slots, progress, pods, others, current, stale, every_current, probes)


def _entries(draft: Draft) -> dict[str, Obj]:
    """Each group's status.groups entry (a copy to update), by name; new groups start
    empty. Entries of anything else than a dict are dropped (status is writable)."""
    spec = draft.spec
    old = {e.get(st.GROUP_NAME): dict(e) for e in draft.get(st.GROUPS) or [] if isinstance(e, dict)}
    return {
        g.name: old.get(g.name) or {st.GROUP_NAME: g.name, st.ATTEMPT: 0}
        for g in pod_groups(draft.seen.name, spec)
    }


def _read_parallel_progress(
    draft: Draft, slots: list[Slot], progress_configmap: Obj | None
) -> dict[str, ProgressView]:
    """The oracle's record into status (trials, best trial), each trial group's into its
    entry, the job's progress and checkpoint times the latest of the groups'. Returns
    each group's own record, by group name."""
    trial_slots = [s for s in slots if not s.group.oracle]
    ignored: list[str] = []
    oracle_progress = copy_progress(draft, progress_configmap, slots[0].group.tuner_id)
    ignored.extend(oracle_progress.ignored)
    apply_progress(draft, oracle_progress)
    progress = {s.group.name: _group_progress(draft, progress_configmap, s, ignored) for s in slots}
    for slot in trial_slots:
        for key in REPORTED:
            value = progress[slot.group.name].values.get(key)
            if value is not None:
                slot.put(key, value)
    draft.decision.ignored = tuple(ignored)
    draft.decision.reset_progress = False
    groups_last = [s.get(st.LAST_PROGRESS_TIME) for s in trial_slots]
    for key, values in (
        (st.LAST_PROGRESS_TIME, [*groups_last, oracle_progress.text("lastProgressTime")]),
        (st.LAST_CHECKPOINT_TIME, [s.get(st.LAST_CHECKPOINT_TIME) for s in trial_slots]),
    ):
        latest = _latest(values)
        if latest is not None:
            draft.put(key, latest)
    return progress


def _group_progress(
    draft: Draft, configmap: Obj | None, slot: Slot, ignored: list[str]
) -> ProgressView:
    """The group's own record, if its current pod group wrote it (an older trainer's
    record stays until the new one reports: it must not count as a restore)."""
    name = names.progress_configmap_name(draft.seen.name)
    view = progress_from_configmap(configmap, name, slot.group.tuner_id)
    if view is None:
        return ProgressView({})
    ignored.extend(view.ignored)
    reported = st.parse_time(view.text("lastProgressTime"))
    started = st.parse_time(slot.get(st.START_TIME))
    if reported is not None and started is not None and reported < started:
        return ProgressView({})
    return view


def _latest(values: list[Any]) -> str | None:
    times = [(st.parse_time(v), v) for v in values]
    known = [(t, v) for t, v in times if t is not None]
    return max(known)[1] if known else None
