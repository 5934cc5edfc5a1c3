"""The operations, as a Python API (notebooks) and behind the `tuneop` command:
run, follow, status, list, logs, results, tensorboard, delete."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import log_stream, show
from .kube import ClientError, Cluster
from .submit import RunRequest, configmap, job_name, script_files, tuning_job

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run(request: RunRequest, cluster: Cluster) -> dict[str, Any]:
    """Create the script's ConfigMap, then the TuningJob that owns it. A job that cannot
    be created leaves nothing behind (its ConfigMap is deleted again)."""
    name = job_name(request)
    files = script_files(request.script, request.requirements)
    job = tuning_job(request, name, cluster.namespace)
    body = configmap(name, cluster.namespace, files)
    cluster.create_configmap(body)
    try:
        created = cluster.create_job(job)
        cluster.own_configmap(body["metadata"]["name"], created)
    except BaseException:
        cluster.delete_configmap(body["metadata"]["name"])
        raise
    return created


def follow(
    cluster: Cluster,
    name: str,
    out: Callable[[str], None] = print,
    every: float = 2.0,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Print the job's progress line whenever it changes until the job ends; its last
    state. `timeout`: give up (ClientError) after that many seconds."""
    started, last = time.monotonic(), ""
    while True:
        job = cluster.job(name)
        line = show.progress_line(job)
        if line != last:
            out(line)
            last = line
        if (job.get("status") or {}).get("phase") in show.TERMINAL:
            return job
        if timeout is not None and time.monotonic() - started > timeout:
            raise ClientError(f"{name} has not ended after {timeout:.0f} s ({line})")
        time.sleep(every)


def delete(cluster: Cluster, name: str) -> None:
    """Delete the job; its pods stop, its script's ConfigMap goes with it, a retained
    checkpoint claim stays."""
    cluster.delete_job(name)


def results(cluster: Cluster, name: str, dest: Path) -> str:
    """results.json, the model and the script's outputs/ copied into `dest` (any size,
    SHA-256 checked); what the copy printed."""
    done = _script(cluster, "fetch-results.sh", name, cluster.namespace, str(dest))
    return done.stdout.strip()


def logs(cluster: Cluster, name: str, follow_logs: bool = False) -> int:
    """The trainer's log (worker 0 of each trial group); with `follow_logs`, every
    trainer pod as it starts, across preemptions, until the job ends."""
    if follow_logs:
        return log_stream.follow_logs(cluster, name, _kubectl(cluster), printer())
    return log_stream.print_logs(cluster, name, _kubectl(cluster), printer())


def tensorboard(cluster: Cluster, name: str, port: int) -> int:
    """Serve the job's TensorBoard logs on localhost:`port` until Ctrl-C."""
    script = SCRIPTS / "tensorboard.sh"
    cmd = ["bash", str(script), name, cluster.namespace, str(port)]
    return subprocess.run(cmd, env=_script_env(cluster), check=False).returncode


def _script(cluster: Cluster, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        env=_script_env(cluster), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise ClientError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else
                          f"{script} exited {done.returncode}")  # fmt: skip
    return done


def _kubectl(cluster: Cluster) -> list[str]:
    binary = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not binary:
        raise ClientError("kubectl is not on PATH (set KUBECTL to it)")
    return [*binary.split(), *cluster.kubectl_flags()]


def _script_env(cluster: Cluster) -> dict[str, str]:
    return {**os.environ, "KUBECTL": " ".join(_kubectl(cluster))}


def printer(stream: Any = sys.stdout) -> Callable[[str], None]:
    return lambda line: print(line, file=stream, flush=True)
