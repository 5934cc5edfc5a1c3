"""Keep a local control plane running in the background (test infrastructure).

    python -m tests.localcluster up [--hook pkg.module:function ...]
    python -m tests.localcluster down
    python -m tests.localcluster status

``up`` starts a detached daemon (``serve``) that holds a ControlPlane in the state dir
(``$TUNEOP_CACHE/run/cluster``, default ``~/.cache/tuneop/run/cluster``), returns once
it is ready and prints ``export KUBECONFIG=<path>`` as its last line.  If one is already
running it just prints that line.  ``down`` stops the daemon and every process it
started.  The daemon's own log is ``<state>/daemon.log``; the components' logs are in
``<state>/logs/``.

Hooks extend ``up`` (e.g. node agents): ``--hook pkg.module:function`` imports the
function in the daemon after the control plane is ready and calls ``function(cp,
state_dir)``; it may return a zero-argument callable that ``down`` runs (in reverse
order) before the control plane stops.  A hook's exception fails ``up``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.localcluster import tools
from tests.localcluster.controlplane import ControlPlane, describe

Hook = Callable[[ControlPlane, Path], Callable[[], None] | None]
READY_FILE = "ready"
PID_FILE = "daemon.pid"
UP_TIMEOUT_SECONDS = 300.0


def state_dir() -> Path:
    return tools.cache_dir() / "run" / "cluster"


def _read_pid(state: Path) -> int | None:
    try:
        pid = int((state / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def _load_hook(spec: str) -> Hook:
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"hook {spec!r}: expected pkg.module:function")
    hook: Any = getattr(importlib.import_module(module_name), attr)
    return hook  # type: ignore[no-any-return]


def serve(state: Path, hooks: list[str]) -> int:
    """The daemon: start, run hooks, mark ready, wait for SIGTERM/SIGINT, tear down."""
    stop_event = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop_event.set())
    cp = ControlPlane(state, tools.bin_dir(build=True))
    cleanups: list[Callable[[], None]] = []
    try:
        cp.start()
        for spec in hooks:
            cleanup = _load_hook(spec)(cp, state)
            if cleanup is not None:
                cleanups.append(cleanup)
        (state / READY_FILE).write_text(describe(cp) + "\n")
        print(f"ready: {describe(cp)}", flush=True)
        while not stop_event.is_set() and cp.running:
            stop_event.wait(1.0)
        return 0
    finally:
        with contextlib.suppress(FileNotFoundError):
            (state / READY_FILE).unlink()
        for cleanup in reversed(cleanups):
            try:
                cleanup()
            except Exception as exc:  # keep tearing down
                print(f"cleanup {cleanup!r} failed: {exc}", flush=True)
        cp.stop()
        print("stopped", flush=True)


def up(state: Path, hooks: list[str]) -> int:
    if _read_pid(state) is not None and (state / READY_FILE).exists():
        print(f"export KUBECONFIG={state / 'admin.kubeconfig'}")
        return 0
    down(state, quiet=True)
    shutil.rmtree(state, ignore_errors=True)  # a fresh cluster each time
    state.mkdir(parents=True)
    tools.bin_dir(build=True)  # build (cold: tens of minutes) in the foreground
    cmd = [sys.executable, "-m", "tests.localcluster", "serve", "--state-dir", str(state)]
    for spec in hooks:
        cmd += ["--hook", spec]
    with (state / "daemon.log").open("ab") as log:
        daemon = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=tools.REPO_ROOT,
        )
    (state / PID_FILE).write_text(f"{daemon.pid}\n")
    deadline = time.monotonic() + UP_TIMEOUT_SECONDS
    while not (state / READY_FILE).exists():
        if daemon.poll() is not None or time.monotonic() > deadline:
            tail = (state / "daemon.log").read_text(errors="replace")[-4000:]
            print(f"local cluster failed to start; daemon log:\n{tail}", file=sys.stderr)
            down(state, quiet=True)
            return 1
        time.sleep(0.25)
    print(f"local cluster up: {(state / READY_FILE).read_text().strip()}")
    print(f"export KUBECONFIG={state / 'admin.kubeconfig'}")
    return 0


def down(state: Path, quiet: bool = False) -> int:
    pid = _read_pid(state)
    if pid is None:
        if not quiet:
            print("local cluster: not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    else:  # the daemon hung: kill it; its components die with it (PR_SET_PDEATHSIG)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        (state / PID_FILE).unlink()
    if not quiet:
        print("local cluster: stopped")
    return 0


def status(state: Path) -> int:
    if _read_pid(state) is not None and (state / READY_FILE).exists():
        print(f"running: {(state / READY_FILE).read_text().strip()}")
        return 0
    print("not running")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.localcluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=["up", "down", "status", "serve"])
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--hook", action="append", default=[], metavar="MODULE:FUNCTION")
    args = parser.parse_args(argv)
    state = (args.state_dir or state_dir()).resolve()
    if args.command == "up":
        return up(state, args.hook)
    if args.command == "down":
        return down(state)
    if args.command == "status":
        return status(state)
    return serve(state, args.hook)


if __name__ == "__main__":
    sys.exit(main())
