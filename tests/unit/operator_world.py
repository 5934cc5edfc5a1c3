"""A job's world for driving the reconcile decision through scenarios: `World.step` is one
pass of the operator, the pure decision applied by the real tuneop.act.executor to an
in-memory API server (`WorldKube`: status merge-patched into the job, pods created and
deleted gracefully, Events kept); the world plays the cluster and the trainer (pods run,
end, vanish; progress reported)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import tuneop_contract as contract
from tuneop.act import executor
from tuneop.api import names, queue
from tuneop.api import status as st
from tuneop.api.events import Event
from tuneop.api.spec import job_spec
from tuneop.decide.observed import Observed, Refusal
from tuneop.decide.patch import Decision
from tuneop.decide.reconcile import decide
from tuneop.render import children
from tuneop.render.trainer_pods import PodSettings
from tuneop.run.config import Config

from tests.unit.fakes import FakeKube

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
"""When every World's clock starts."""
CONFIG = Config.from_env({})
SETTINGS = PodSettings(CONFIG.trainer_metrics_port, CONFIG.trainer_uid)

Obj = dict[str, Any]


def observed(job: Obj, pods: Sequence[Obj], *, now: dt.datetime, **read: Any) -> Observed:
    """What a pass would read: `job` and `pods` at `now`, with whatever else was read
    (`read`: Observed's fields by name); the spec parsed from the job unless given."""
    spec = read.pop("spec", None) or job_spec(job)
    return Observed(job=job, spec=spec, pods=pods, now=now, **read)


def merge_patch(target: Obj, patch: Obj) -> Obj:
    """`patch` merged into `target` as a JSON merge patch (RFC 7386): objects merged
    key by key, null removes, anything else replaces."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_patch(merged[key], value)
        elif isinstance(value, dict):
            merged[key] = merge_patch({}, value)
        else:
            merged[key] = value
    return merged


class WorldKube(FakeKube):
    """FAKE API server of a World: what FakeKube holds, plus the job's status
    merge-patched into the World's job, pods deleted gracefully (deletionTimestamp set;
    the World's kubelet removes them), Kueue releases patched onto the pod, and each
    Event kept whole in `world.events`."""

    def __init__(self, world: World) -> None:
        super().__init__({}, job=world.job)
        self.world = world

    def patch_status(
        self, namespace: str, name: str, status: Obj, *, resource_version: str | None = None
    ) -> None:
        super().patch_status(namespace, name, status, resource_version=resource_version)
        self.world.job["status"] = merge_patch(self.world.job.get("status") or {}, status)

    def delete(
        self, kind: str, namespace: str, name: str, *, uid: str | None = None, **options: Any
    ) -> bool:
        pod = self.objects.get(("Pod", name)) if kind == "Pod" else None
        if pod is None:
            return super().delete(kind, namespace, name, uid=uid, **options)
        self.calls.append(("delete", f"Pod/{name}"))
        self.deleted.append((kind, name, uid))
        pod["metadata"].setdefault("deletionTimestamp", st.rfc3339(self.world.now))
        return True

    def release_pod(self, namespace: str, name: str, uid: str | None) -> bool:
        pod = self.objects.get(("Pod", name))
        if pod is None:
            return False
        self.calls.append(("release", f"Pod/{name}"))
        pod["metadata"] = merge_patch(pod["metadata"], queue.release_patch()["metadata"])
        return True

    def post_event(self, job: Obj, event: Event) -> None:
        super().post_event(job, event)
        self.world.events.append((event.type, event.reason, event.message))


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
        self.now = T0
        self.events: list[tuple[str, str, str]] = []
        self.last_seen: dict[str, dict[str, Any]] = {}
        self.configmaps: dict[str, dict[str, Any]] = {}
        """The namespace's ConfigMaps the operator reads (the user's script)."""
        self.kube = WorldKube(self)

    @property
    def status(self) -> dict[str, Any]:
        return self.job.setdefault("status", {})

    @property
    def pods(self) -> dict[str, dict[str, Any]]:
        """The job's pods the API server holds, by name (the objects themselves)."""
        return {name: obj for (kind, name), obj in self.kube.objects.items() if kind == "Pod"}

    @pods.setter
    def pods(self, pods: dict[str, dict[str, Any]]) -> None:
        """The API server now holds exactly these pods."""
        for key in [k for k in self.kube.objects if k[0] == "Pod"]:
            del self.kube.objects[key]
        self.kube.objects.update({("Pod", name): pod for name, pod in pods.items()})

    @property
    def reported(self) -> dict[str, Any] | None:
        """The job's progress ConfigMap (the trainer writes it, the operator reads it)."""
        return self.kube.objects.get(("ConfigMap", names.progress_configmap_name("j")))

    @reported.setter
    def reported(self, configmap: dict[str, Any] | None) -> None:
        key = ("ConfigMap", names.progress_configmap_name("j"))
        if configmap is None:
            self.kube.objects.pop(key, None)
            return
        built = children.build_progress_configmap(self.job)
        self.kube.objects[key] = {**built, "data": dict(configmap.get("data") or {})}

    def step(self, seconds: float = 2) -> Decision:
        """One reconcile pass `seconds` later: decide, and apply with the real executor
        (deciding again if the API server refuses the pods); the decision applied."""
        self.now += dt.timedelta(seconds=seconds)

        def decide_pass(refused: Refusal | None) -> Decision:
            return decide(
                observed(
                    self.job,
                    list(self.pods.values()),
                    now=self.now,
                    last_seen=self.last_seen,
                    scripts=self.configmaps,
                    progress=self.reported,
                    refused=refused,
                    settings=SETTINGS,
                )
            )

        return executor.apply_pass(self.kube, self.job, decide_pass).decision

    # --- what the cluster and the trainer do -----------------------------------
    def run_pods(self) -> None:
        """The pods run from now on: phase Running, the trainer container started."""
        running = {"running": {"startedAt": st.rfc3339(self.now)}}
        for pod in self.pods.values():
            pod["status"] = {
                "phase": "Running",
                "containerStatuses": [{"name": "trainer", "state": dict(running)}],
            }

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
        self.last_seen[name] = self.kube.objects.pop(("Pod", name))

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


UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
}


def unschedulable(w: World) -> None:
    for pod in w.pods.values():
        pod["status"] = {"phase": "Pending", "conditions": [UNSCHEDULABLE]}


QUEUE = {queue.QUEUE_LABEL: "team-a"}


def gate(w: World) -> None:
    """What Kueue's webhook does to a labelled pod."""
    for pod in w.pods.values():
        pod["spec"]["schedulingGates"] = [{"name": queue.ADMISSION_GATE}]
        pod["metadata"]["finalizers"] = [queue.FINALIZER]
        pod["status"] = {"phase": "Pending"}


def admit(w: World) -> None:
    for pod in w.pods.values():
        pod["spec"].pop("schedulingGates", None)
        pod["status"] = {"phase": "Running"}
