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
from tuneop_contract.spec import JobSpec

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
    last streams have drained: 0 when it succeeded, 1 when it failed. Any error or
    Ctrl-C stops the streams started."""
    streams: dict[str, subprocess.Popen[bytes]] = {}
    try:
        phase = _follow(cluster, name, kubectl, say, start, streams)
    finally:
        _stop(streams.values())
    return 0 if phase == "Succeeded" else 1


def _follow(
    cluster: Cluster, name: str, kubectl: list[str], say: Say, start: Start,
    streams: dict[str, subprocess.Popen[bytes]],
) -> str:  # fmt: skip
    """Start a stream per trainer pod as it starts; the job's phase once it ended and
    its streams ended or had DRAIN_SECONDS to."""
    job = cluster.job(name)
    prefix = JobSpec.from_dict(job.get("spec")).parallel  # one stream per trial group
    while True:
        for pod in started_trainers(cluster.pods(name)):
            uid = str(pod["metadata"].get("uid") or pod["metadata"]["name"])
            if uid not in streams:
                say(header(pod))
                streams[uid] = start([*_command(cluster, kubectl, pod, prefix), "--follow"])
        phase = str((job.get("status") or {}).get("phase") or "")
        if phase in TERMINAL:
            deadline = time.monotonic() + DRAIN_SECONDS
            while any(s.poll() is None for s in streams.values()) and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS / 4)
            return phase
        time.sleep(POLL_SECONDS)
        job = cluster.job(name)


def _stop(streams: Any) -> None:
    for stream in streams:
        if stream.poll() is None:
            stream.terminate()
            stream.wait()


def _command(
    cluster: Cluster, kubectl: list[str], pod: dict[str, Any], prefix: bool = False
) -> list[str]:
    return [*kubectl, "logs", "-n", cluster.namespace, pod["metadata"]["name"],
            "-c", contract.TRAINER_CONTAINER, *(["--prefix"] if prefix else [])]  # fmt: skip
