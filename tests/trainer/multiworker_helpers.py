"""Trainer tests' MultiWorkerMirroredStrategy groups: worker processes with TF_CONFIG on
loopback and one shared checkpoint directory, as the pods of one group on one claim."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path
from typing import Any

from trainer_helpers import env
from tuneop_contract import ENV_TF_CONFIG, read_progress

from tests.forkserver import TrainerProcess, launch


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start_group(
    spec: Path, ckpt: Path, logs: list[Path], script: Path | None = None
) -> list[TrainerProcess]:
    """Start the workers: `run --spec`, or `exec` on `script` (script mode)."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(len(logs))]
    procs = []
    for index, log in enumerate(logs):
        e = env(devices=1)
        e[ENV_TF_CONFIG] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        )
        cmd = ["-m", "tuneop_trainer", "run", "--dir", str(ckpt), "--spec", str(spec)]
        if script is not None:
            cmd = ["-m", "tuneop_trainer", "exec", "--dir", str(ckpt), "--spec", str(spec)]
            cmd += ["--deterministic", str(script)]
        procs.append(launch(cmd, e, log, cwd=ckpt.parent))
    return procs


def wait_all(procs: list[TrainerProcess], timeout: float = 150) -> list[int]:
    try:
        return [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def wait_progress(procs: list[TrainerProcess], ckpt: Path, pred: Any) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), "a worker exited before the kill point"
        try:
            progress = read_progress(ckpt)
        except (ValueError, OSError):
            progress = None
        if progress is not None and pred(progress):
            return
        time.sleep(0.05)
    raise AssertionError("kill point not reached")


def kill_group_when(
    spec: Path, ckpt: Path, logs: list[Path], pred: Any, script: Path | None = None
) -> None:
    """Start a group, SIGKILL every worker once pred(progress) holds (the pod group is
    lost together)."""
    procs = start_group(spec, ckpt, logs, script)
    try:
        wait_progress(procs, ckpt, pred)
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
        assert [proc.wait(timeout=30) for proc in procs] == [-signal.SIGKILL] * 2
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
