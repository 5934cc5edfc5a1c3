"""The scale benchmark's watches: each job's phase, and the arrival times (time.monotonic,
all in this process) of each event the operator reacts to and of the status that
follows it, from which `latencies` pairs them up:
- preemption: a trainer pod's end (a container terminated, or the pod gone, without
  success) → the job's `status.preemptions` one higher;
- finish: a trainer pod Succeeded → the job's `status.phase` Succeeded;
- progress: a progress ConfigMap holding a new record (its `step`) → the same step in
  `status.progress`;
- create: a new TuningJob → its first `status.phase`."""

from __future__ import annotations

import collections
import contextlib
import json
import time
from collections.abc import Callable

import tuneop_contract as contract
from kubernetes import client
from tuneop.api import names

from bench.operator.apimeasure import Obj, Watcher, container_ended, stream

KINDS = ("preemption", "finish", "progress", "create")


class ScaleWatcher(Watcher):
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.phases: dict[str, str] = {}
        self.added: dict[str, float] = {}
        self.first_status: dict[str, float] = {}
        self.pod_ends: dict[str, tuple[str, float]] = {}  # pod uid -> (job, when)
        self.pod_success: dict[str, float] = {}
        self.succeeded: dict[str, float] = {}
        self.progress_sent: dict[tuple[str, int], float] = {}
        self.progress_status: dict[tuple[str, int], float] = {}
        self.preemption_counts: dict[str, int] = {}
        self.preemption_changes: dict[str, list[float]] = collections.defaultdict(list)
        self.window: list[float] = [0.0, 0.0]
        super().__init__(api, namespace)

    def watches(self) -> list[Callable[[dict[str, str]], None]]:
        return [*super().watches(), self._progress_events]

    def measuring(self, on: bool) -> None:
        self.window[0 if on else 1] = time.monotonic()

    def count(self, phase: str) -> int:
        with self.lock:
            return sum(1 for p in self.phases.values() if p == phase)

    def _progress_events(self, since: dict[str, str]) -> None:
        for _, configmap in stream(
            self.core.list_namespaced_config_map, self.namespace, since=since,
            label_selector=names.PROGRESS_SELECTOR, timeout_seconds=60,
        ):  # fmt: skip
            now = time.monotonic()
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                record = json.loads(configmap["data"][contract.progress_key()])
                job = configmap["metadata"]["labels"][names.LABEL_JOB]
                with self.lock:
                    self.progress_sent.setdefault((job, int(record["step"])), now)

    def on_pod(self, kind: str, pod: Obj, now: float) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        job = (meta.get("labels") or {}).get(names.LABEL_JOB)
        if not job:
            return
        with self.lock:
            if status.get("phase") == "Succeeded":
                self.pod_success.setdefault(job, now)
            elif container_ended(pod) or kind == "DELETED":
                self.pod_ends.setdefault(meta["uid"], (job, now))

    def on_job(self, kind: str, job: Obj, now: float) -> None:
        name, status = job["metadata"]["name"], job.get("status") or {}
        step = (status.get("progress") or {}).get("step")
        count = int(status.get("preemptions") or 0)
        with self.lock:
            if kind == "DELETED":
                self.phases.pop(name, None)
                return
            self.added.setdefault(name, now)
            if status.get("phase"):
                self.phases[name] = status["phase"]
                self.first_status.setdefault(name, now)
            if status.get("phase") == "Succeeded":
                self.succeeded.setdefault(name, now)
            if isinstance(step, int):
                self.progress_status.setdefault((name, step), now)
            if count > self.preemption_counts.setdefault(name, count):
                self.preemption_counts[name] = count
                self.preemption_changes[name].append(now)

    def latencies(self) -> tuple[dict[str, list[float]], dict[str, int]]:
        """Per kind, the seconds from each event seen in the measured window to the
        status that followed it; and how many such events no status followed (yet)."""
        start, end = self.window
        out: dict[str, list[float]] = {kind: [] for kind in KINDS}
        missing: dict[str, int] = dict.fromkeys(KINDS, 0)
        with self.lock:
            pairs = [
                ("create", self.added, self.first_status),
                ("finish", self.pod_success, self.succeeded),
                ("progress", self.progress_sent, self.progress_status),
            ]
            for kind, causes, effects in pairs:
                for key, seen in causes.items():
                    if start <= seen <= end:
                        effect = effects.get(key)  # type: ignore[call-overload]
                        if effect is None:
                            missing[kind] += 1
                        else:
                            out[kind].append(max(0.0, effect - seen))
            out["preemption"], missing["preemption"] = self._preemptions(start, end)
        return out, missing

    def _preemptions(self, start: float, end: float) -> tuple[list[float], int]:
        """Each pod end in the window, paired with its job's first count change after
        it (in order: one change per end)."""
        ends: dict[str, list[float]] = collections.defaultdict(list)
        for job, seen in self.pod_ends.values():
            ends[job].append(seen)
        out, missing = [], 0
        for job, times in ends.items():
            changes = sorted(self.preemption_changes.get(job, []))
            for seen in sorted(times):
                # the two watches race: the count may arrive a moment before the end
                later = [c for c in changes if c >= seen - 0.5]
                if later:
                    changes.remove(later[0])
                if start <= seen <= end:
                    if later:
                        out.append(max(0.0, later[0] - seen))
                    else:
                        missing += 1
        return out, missing
