"""The operations, as a Python API (notebooks) and behind the `tuneop` command:
run, follow, status, list, logs, results, tensorboard, delete."""

from __future__ import annotations

import os
import shutil
import signal
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
    except BaseException:
        cluster.delete_configmap(body["metadata"]["name"])
        raise
    cluster.own_configmap(body["metadata"]["name"], created)
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
    return str(_script(cluster, "fetch-results.sh", name, cluster.namespace, str(dest))).strip()


def logs(cluster: Cluster, name: str, follow_logs: bool = False) -> int:
    """The trainer's log (worker 0 of each trial group); with `follow_logs`, every
    trainer pod as it starts, across preemptions, until the job ends."""
    if follow_logs:
        return log_stream.follow_logs(cluster, name, _kubectl(cluster), printer())
    return log_stream.print_logs(cluster, name, _kubectl(cluster), printer())


def tensorboard(cluster: Cluster, name: str, port: int) -> int:
    """Serve the job's TensorBoard logs on localhost:`port` until Ctrl-C."""
    return int(
        _script(cluster, "tensorboard.sh", name, cluster.namespace, str(port), capture=False)
    )


def _script(cluster: Cluster, script: str, *args: str, capture: bool = True) -> Any:
    """Run a shipped script; with `capture`, its output (ClientError with its last line
    when it fails), else its exit code. Ctrl-C reaches it as SIGINT and is waited for,
    so its trap deletes the helper pod it made."""
    pipe = subprocess.PIPE if capture else None
    try:
        proc = subprocess.Popen(["bash", str(SCRIPTS / script), *args], env=_script_env(cluster),
                                stdout=pipe, stderr=pipe, text=True)  # fmt: skip
    except OSError as exc:
        raise ClientError(f"cannot run {script}: {exc}") from None
    try:
        out, err = proc.communicate()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.wait()
        raise
    if not capture:
        return proc.returncode
    if proc.returncode != 0:
        raise ClientError(err.strip().splitlines()[-1] if err.strip() else
                          f"{script} exited {proc.returncode}")  # fmt: skip
    return out


def _kubectl(cluster: Cluster) -> list[str]:
    binary = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not binary:
        raise ClientError("kubectl is not on PATH (set KUBECTL to it)")
    return [*binary.split(), *cluster.kubectl_flags()]


def _script_env(cluster: Cluster) -> dict[str, str]:
    return {**os.environ, "KUBECTL": " ".join(_kubectl(cluster))}


def printer(stream: Any = sys.stdout) -> Callable[[str], None]:
    return lambda line: print(line, file=stream, flush=True)
