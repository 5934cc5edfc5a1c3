"""The objects a decision creates, rendered (render.children, render.trainer_pods) from
what it decided to create, so that the executor applies them as they are: the
children a pod group needs, the trainer pods of the sequential group and of each
parallel group to start, in the order they are created, and the probe pods."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from tuneop_contract.spec import JobSpec

from ..api import names
from ..api.groups import group_named
from ..render import children, trainer_pods
from ..render.trainer_pods import PodSettings
from .patch import Child, Decision

Obj = dict[str, Any]

REFRESHED = {"ConfigMap": "data", "Role": "rules"}
"""Children that start each pod group as built (the field compared): the spec file
follows spec changes (the mutable fields), the progress map is emptied (the last
group's record says nothing about the new one; not with Decision.reset_progress
False), the trainer's Role follows the operator's version (a job created by an older
operator gets the current rule)."""


def rendered(
    decision: Decision,
    job: Obj,
    spec: JobSpec,
    settings: PodSettings | None = None,
    now: dt.datetime | None = None,
) -> Decision:
    """`decision` with its children, pods and probes rendered for `job` (`spec`: its
    parsed spec; `settings`: the operator's, the defaults when not given; `now`: when
    they are made, the current time when not given). The trainer pods see the status
    this decision writes (status.oomTrials -> their env), the probes the job as read."""
    made = dataclasses.asdict(settings or PodSettings()) | {"now": now}
    updated = {**job, "status": decision.merged_status(job)}
    pods = [
        trainer_pods.build_pod(updated, spec, index, decision.create_attempt, **made)
        for index in decision.create_pods
    ]
    for group_name, attempt in decision.create_groups:
        group = group_named(job["metadata"]["name"], spec, group_name)
        if group is None:  # the decision was made from this very spec
            continue
        for index in range(len(group.pod_names)):
            pods.append(trainer_pods.build_pod(updated, spec, index, attempt, group=group, **made))
    probes = [
        trainer_pods.build_probe(job, spec, index, node, **made)
        for index, node in decision.create_probes
    ]
    # the progress map is left as it is without reset_progress (its siblings report there)
    kept = () if decision.reset_progress else (names.COMPONENT_PROGRESS,)
    made_children = [
        Child(child, None if _component(child) in kept else REFRESHED.get(child["kind"]))
        for child in (children.build_children(job, spec) if decision.ensure_children else [])
    ]
    return dataclasses.replace(decision, children=made_children, pods=pods, probes=probes)


def _component(obj: Obj) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(names.LABEL_COMPONENT)
