"""A job's world for driving the reconcile decision through scenarios: `World` applies
each Decision the way tuneop.act.executor does (merge-patch status, create/delete pods) to
in-memory dicts, and plays the cluster and the trainer (pods run, end, vanish; progress
reported), so the pure decision logic is exercised step by step."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import tuneop_contract as contract
from tuneop.api import names
from tuneop.api import status as st
from tuneop.api.spec import JobSpec
from tuneop.decide.patch import Decision
from tuneop.decide.reconcile import decide
from tuneop.render import children, trainer_pods

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
"""When every World's clock starts."""


class World:
    """TuningJob `ns/j` (hypermodel mode, `workers` per group, a small failure budget,
    `spec` fields laid over), its pods, Events and progress ConfigMap; `step()` is one
    reconcile pass `seconds` later."""

    def __init__(self, workers: int = 1, **spec: Any) -> None:
        self.job: dict[str, Any] = {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": {
                "image": "img",
                "hypermodel": "m:H",
                "distribution": {"workers": workers},
                "failurePolicy": {
                    "maxFailures": 2,
                    "backoffSeconds": 10,
                    "maxBackoffSeconds": 15,
                    "maxPreemptions": 2,
                },
                **spec,
            },
        }
        self.pods: dict[str, dict[str, Any]] = {}
        self.now = T0
        self.events: list[tuple[str, str, str]] = []
        self.children_ensured = 0
        self.last_seen: dict[str, dict[str, Any]] = {}
        self.configmaps: dict[str, dict[str, Any]] = {}
        """The namespace's ConfigMaps the operator reads (the user's script)."""
        self.reported: dict[str, Any] | None = None
        """The job's progress ConfigMap (the trainer writes it, the operator reads it)."""

    @property
    def status(self) -> dict[str, Any]:
        return self.job.setdefault("status", {})

    def step(self, seconds: float = 2) -> Decision:
        self.now += dt.timedelta(seconds=seconds)
        d = decide(
            self.job,
            list(self.pods.values()),
            now=self.now,
            last_seen=self.last_seen,
            configmaps=self.configmaps,
            progress_configmap=self.reported,
        )
        spec = JobSpec.from_dict(self.job["spec"])
        if d.ensure_children:
            self.children_ensured += 1
            self.reported = children.build_progress_configmap(self.job)  # reset, as apply does
        for i in d.create_pods:
            pod = trainer_pods.build_pod(self.job, spec, i, d.create_attempt)
            self.pods.setdefault(pod["metadata"]["name"], pod)
        self.job["status"] = d.merged_status(self.job)
        self.job["status"] = {k: v for k, v in self.job["status"].items() if v is not None}
        if "progress" in self.job["status"]:
            progress = self.job["status"]["progress"]
            self.job["status"]["progress"] = {k: v for k, v in progress.items() if v is not None}
        for name, _ in d.delete_pods:
            self.pods[name]["metadata"]["deletionTimestamp"] = st.rfc3339(self.now)
        self.events += [(e.type, e.reason, e.message) for e in d.events]
        return d

    # --- what the cluster and the trainer do -----------------------------------
    def run_pods(self) -> None:
        for pod in self.pods.values():
            pod["status"] = {"phase": "Running"}

    def terminate(self, name: str, exit_code: int, message: str = "", **status: Any) -> None:
        pod = self.pods[name]
        phase = "Succeeded" if exit_code == 0 else "Failed"
        terminated = {"exitCode": exit_code, "reason": "Error", "message": message}
        pod["status"] = {
            "phase": phase,
            "containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}],
            **status,
        }
        self.last_seen[name] = pod

    def vanish(self, name: str) -> None:
        self.last_seen[name] = self.pods.pop(name)

    def gc_deleted(self) -> None:
        for name in [n for n, p in self.pods.items() if p["metadata"].get("deletionTimestamp")]:
            self.vanish(name)

    def progress(self, **fields: Any) -> None:
        """The trainer reports its whole record (a restarted one first restores it from
        the volume, where it is the last one reported)."""
        current = contract.progress_from_configmap(self.reported) or self.status.get("progress")
        fresh = contract.Progress.from_dict(current or {})
        for key, value in fields.items():
            setattr(fresh, key, value)
        fresh.last_progress_time = st.rfc3339(self.now)
        self.report(fresh.to_status())

    def report(self, record: Any) -> None:
        """What lands in the progress ConfigMap (any JSON: a forged one too)."""
        self.reported = {"data": {contract.PROGRESS_KEY: json.dumps(record)}}

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events]

    def condition(self, type_: str) -> dict[str, Any]:
        cond = st.get_condition(self.status.get("conditions") or [], type_)
        assert cond is not None, type_
        return cond


def start(world: World) -> None:
    """The first passes: children and the first pod group created, the pods running,
    phase Running."""
    d = world.step()
    assert d.ensure_children and d.create_pods == list(range(len(d.create_pods)))
    world.run_pods()
    world.step()
    assert world.status["phase"] == st.PHASE_RUNNING
