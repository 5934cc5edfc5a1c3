"""`tuneop logs`: the trainer's log, worker 0 of each trial group. With --follow it goes
on across preemptions: each trainer pod the operator starts after one is followed in
turn, until the job ends. A deleted pod's log goes with it: what is shown is what the
cluster still holds."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

import tuneop_contract as contract

from .kube import ClientError, Cluster
from .show import TERMINAL

POLL_SECONDS = 2.0
# After the job ends, how long its last pods' streams may take to drain.
DRAIN_SECONDS = 30.0

Start = Callable[[Sequence[str]], "subprocess.Popen[bytes]"]
Say = Callable[[str], None]


def started_trainers(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Worker 0 of each trial group whose trainer container has started (so has a log),
    oldest first."""
    trainers = [p for p in pods if p["metadata"]["name"].endswith("-worker-0") and _started(p)]
    return sorted(trainers, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))


def _started(pod: dict[str, Any]) -> bool:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        if container.get("name") == contract.TRAINER_CONTAINER:
            state = container.get("state") or {}
            return "running" in state or "terminated" in state
    return False


def header(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"==> {meta['name']} (started {meta.get('creationTimestamp') or '?'}) <=="


def print_logs(cluster: Cluster, name: str, kubectl: list[str], say: Say) -> int:
    """Each started trainer's log as the cluster has it now; the worst exit code."""
    pods = started_trainers(cluster.pods(name))
    if not pods:
        raise ClientError(f"{cluster.namespace}/{name} has no trainer pod that started (yet)")
    worst = 0
    for pod in pods:
        say(header(pod))
        done = subprocess.run(_command(cluster, kubectl, pod), check=False)
        worst = max(worst, done.returncode)
    return worst


def follow_logs(
    cluster: Cluster, name: str, kubectl: list[str], say: Say, start: Start = subprocess.Popen
) -> int:
    """Stream every trainer pod of the job as it starts, until the job has ended and its
    last streams have drained."""
    streams: dict[str, subprocess.Popen[bytes]] = {}
    ended_at: float | None = None
    while True:
        job = cluster.job(name)
        prefix = int((job.get("spec") or {}).get("parallelTrials") or 1) > 1
        for pod in started_trainers(cluster.pods(name)):
            uid = str(pod["metadata"].get("uid") or pod["metadata"]["name"])
            if uid not in streams:
                say(header(pod))
                streams[uid] = start([*_command(cluster, kubectl, pod, prefix), "--follow"])
        if ended_at is None and (job.get("status") or {}).get("phase") in TERMINAL:
            ended_at = time.monotonic()
        if ended_at is not None and _drained(streams.values(), ended_at):
            return 0
        time.sleep(POLL_SECONDS)


def _drained(streams: Any, ended_at: float) -> bool:
    """All streams ended, or the drain time is up (the rest are stopped)."""
    running = [s for s in streams if s.poll() is None]
    if running and time.monotonic() - ended_at < DRAIN_SECONDS:
        return False
    for stream in running:
        stream.terminate()
        stream.wait()
    return True


def _command(
    cluster: Cluster, kubectl: list[str], pod: dict[str, Any], prefix: bool = False
) -> list[str]:
    return [*kubectl, "logs", "-n", cluster.namespace, pod["metadata"]["name"],
            "-c", contract.TRAINER_CONTAINER, *(["--prefix"] if prefix else [])]  # fmt: skip
