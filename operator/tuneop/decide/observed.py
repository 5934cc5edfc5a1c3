"""What one reconcile pass read, as one read-only value (`Observed`), built before
anything is decided: the job and its parsed spec, its pods, what is known of their
nodes, the last version of each pod the watch delivered, the trainers' progress
ConfigMap, the script's ConfigMap, the existing claim, Kueue's Workloads, and what the
API server refused when this pass's first decision was applied. `decide` reads
nothing else."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from tuneop_contract.spec import JobSpec

from ..render.trainer_pods import PodSettings

Obj = dict[str, Any]


class Refusal(NamedTuple):
    """What the API server answered when a decision's pods or children were created:
    the reason (decide.refusal's POD_REJECTED or CHILD_CONFLICT), its message, and the
    pod it refused (None: a child, before any pod)."""

    reason: str
    message: str
    pod: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observed:
    """One pass's reading of the world. Mappings absent from the reading are empty."""

    job: Obj
    """The TuningJob (spec + status) with the cluster-wide trainer defaults laid in."""
    spec: JobSpec
    """The job's spec, parsed once per pass."""
    pods: Sequence[Obj]
    """The job's pods (by label)."""
    now: dt.datetime
    nodes: Mapping[str, Obj | None] = dataclasses.field(default_factory=dict)
    """Node objects by name, None for a node known not to exist (absent: unknown)."""
    last_seen: Mapping[str, Obj] = dataclasses.field(default_factory=dict)
    """The last version of each pod the watch delivered (says why a vanished pod went)."""
    scripts: Mapping[str, Obj | None] = dataclasses.field(default_factory=dict)
    """spec.script.configMap by name (None or absent: not found); run.runtime's reads it
    on first lookup, which comes only where it matters (a group about to start, a
    pending pod, a rejected job to reopen)."""
    progress: Obj | None = None
    """The job's progress ConfigMap, where the trainers report (None: none yet)."""
    claim: Obj | None = None
    """spec.checkpoint.existingClaim of a parallel job (its access modes are checked)."""
    workloads: Mapping[str, Obj | None] = dataclasses.field(default_factory=dict)
    """Kueue Workloads of the job's queued pod groups, by name (their admission message)."""
    refused: Refusal | None = None
    """What the API server refused when this pass's first decision was applied: no pod
    group starts in this one (decide.refusal)."""
    settings: PodSettings = dataclasses.field(default_factory=PodSettings)
    """The operator's settings the trainer pods are rendered with."""

    @property
    def name(self) -> str:
        return str(self.job["metadata"]["name"])

    @property
    def status(self) -> Obj:
        """The job's status as read (empty before the first pass)."""
        return dict(self.job.get("status") or {})
