"""Python processes for the tests without paying TensorFlow's import each time (test
infrastructure): the trainer tests' trainer processes and the local cluster's Python
containers (tests/localcluster/nodeagent).

Importing TensorFlow, Keras and keras-tuner takes 5-15 s of CPU on the test machine, and
the suite starts several hundred trainer processes. A fork server imports them once (and
nothing of tuneop's, nor anything that runs a TensorFlow op) and forks a process for each
command; the child is a real process of its own - its own pid, volume, signals and exit
code - running `python -m tuneop_trainer ...`, `python script.py` or `python -c code`
from that point on, so a SIGKILL, a SIGTERM or a crash behaves as with a fresh
interpreter. What a fork shares with its siblings is what an interpreter fixes at start:
the hash seed and the modules imported before the fork.

A command whose environment differs from the server's in what is read at interpreter
start or import (`FIXED_AT_START`) runs as a fresh process instead, as does every
command when TUNEOP_TEST_FORKSERVER=0.

A request with a `container` (the node agent's launch spec) becomes a container as
tests/localcluster/nodeagent/launch.py makes one: a session of its own, then private
mount and UTS namespaces with the pod's bind mounts and hostname, before the command.

Protocol, one Unix socket connection per command: the client sends a JSON request
with the log file's descriptor (SCM_RIGHTS); the server forks a monitor, which forks
the command, writes its pid as a line (for a container, once it leads its own session),
waits for it and writes its exit code (negative: the signal that ended it) as a second
line.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

ENV_SWITCH = "TUNEOP_TEST_FORKSERVER"
FIXED_AT_START = (
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONUNBUFFERED",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "KERAS_BACKEND",
    "KERAS_HOME",
    "HOME",  # Keras reads ~/.keras at import
    "LD_PRELOAD",
)
_PRELOAD = ("numpy", "tensorflow", "keras", "keras_tuner", "scipy.stats", "sklearn")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """SIGKILL this process when the one that started it goes (no orphan trainers)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# --- the child: one command -----------------------------------------------------


def _enter_container(container: dict[str, Any]) -> None:
    """The container's namespaces, mounts, hostname and working directory (launch.py)."""
    from tests.localcluster.nodeagent import launch

    launch.isolate()
    launch.enter(container)


def _run_command(request: dict[str, Any], log_fd: int) -> int:
    """Become `python <argv>` in `cwd` (or the container) with `env`, writing to
    `log_fd`; its exit code."""
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if request.get("container") is not None:
        try:
            _enter_container(request["container"])
        except Exception as exc:
            print(f"tuneop node agent: cannot start container: {exc}", file=sys.stderr)
            return 128
    else:
        os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv: list[str] = request["argv"]
    try:
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""  # as `python -c` puts the working directory first
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        elif argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()  # as `python -m` puts the working directory first
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # an uncaught exception: the traceback, exit 1, as python does
        traceback.print_exc()
        code = 1
    return code


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _finish(code: int) -> None:
    """Interpreter shutdown as python does it: threads joined, atexit, streams flushed."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def _monitor(conn: socket.socket, request: dict[str, Any], log_fd: int) -> None:
    """Fork the command, report its pid and then its exit code on `conn`. A container's
    pid is reported once it leads a session of its own, so that the caller's first
    signal to its process group reaches it."""
    _die_with_parent()
    session = request.get("container") is not None
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        conn.close()
        os.close(ready_r)
        _die_with_parent()
        if session:
            os.setsid()
        os.close(ready_w)
        _finish(_run_command(request, log_fd))
    os.close(ready_w)
    os.read(ready_r, 1)  # EOF once the child has its session (or has died)
    os.close(ready_r)
    os.close(log_fd)
    conn.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())


# --- the server -----------------------------------------------------------------


def serve(path: str) -> None:
    _die_with_parent()
    for name in _PRELOAD:
        __import__(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors reap themselves
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 1)
        request = json.loads(message)
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _monitor(conn, request, fds[0])
            finally:
                os._exit(0)
        conn.close()
        os.close(fds[0])


# --- the client -----------------------------------------------------------------


class ForkedProcess:
    """A command forked by the server, with the part of `subprocess.Popen`'s interface
    the tests use: pid, args, returncode, poll, wait, send_signal, terminate, kill."""

    def __init__(self, conn: socket.socket, args: list[str]) -> None:
        self.args = args
        self.returncode: int | None = None
        self._conn = conn
        self._file = conn.makefile("r")
        line = self._file.readline()
        if not line:
            raise RuntimeError(f"the fork server did not start {args}")
        self.pid = int(line)

    def poll(self) -> int | None:
        if self.returncode is None:
            readable, _, _ = select.select([self._conn], [], [], 0)
            if readable:
                self._read_exit()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            readable, _, _ = select.select([self._conn], [], [], timeout)
            if not readable:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self._read_exit()
        assert self.returncode is not None
        return self.returncode

    def _read_exit(self) -> None:
        line = self._file.readline()
        self.returncode = int(line) if line else -signal.SIGKILL  # the monitor died
        self._file.close()
        self._conn.close()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The session's server, started on first use with the environment `base_env`."""

    def __init__(self, directory: Path, base_env: dict[str, str]) -> None:
        self.path = str(directory / "forkserver.sock")
        self.base_env = base_env
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def _start(self) -> None:
        """Start the server from a thread of its own that lives as long as the server
        (controlplane.popen_owned: it dies with the thread that started it, and a
        caller's thread, a pod worker's, may end before it), then wait for its "ready"."""
        from tests.localcluster.controlplane import popen_owned

        log = Path(self.path).with_suffix(".log")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a previous server's
        proc = popen_owned(
            [sys.executable, __file__, self.path],
            stdout=subprocess.PIPE,
            stderr=log.open("ab"),
            env=self.base_env,
        )
        self._proc = proc
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            proc.kill()
            proc.wait()
            raise RuntimeError(f"the fork server did not start: {log.read_text()[-2000:]}")

    def accepts(self, env: dict[str, str]) -> bool:
        if os.environ.get(ENV_SWITCH, "1") == "0":
            return False
        return all(env.get(k) == self.base_env.get(k) for k in FIXED_AT_START)

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path | None,
        log: Path,
        container: dict[str, Any] | None = None,
    ) -> ForkedProcess:
        """`python <argv>` (argv without the interpreter), output appended to `log`;
        with `container` (a launch spec), inside that container instead of in `cwd`."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
        request = {
            "argv": argv,
            "env": env,
            "cwd": str(cwd or os.getcwd()),
            "container": container,
        }
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        with log.open("ab") as out:
            socket.send_fds(conn, [json.dumps(request).encode()], [out.fileno()])
        return ForkedProcess(conn, [sys.executable, *argv])

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


def launch(
    argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None, fresh: bool = False
) -> TrainerProcess:
    """`python <argv>` with output appended to `log`: forked from the session's server
    when it can be, else (or with `fresh`: a test that measures the process's memory,
    which a fork shares with its server) a fresh process."""
    server = _session_server
    if server is not None and not fresh and server.accepts(env):
        return server.spawn(argv, env, cwd, log)
    return subprocess.Popen(
        [sys.executable, *argv], stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=cwd
    )


_session_server: ForkServer | None = None
TrainerProcess = subprocess.Popen[bytes] | ForkedProcess


def install(server: ForkServer | None) -> None:
    global _session_server
    _session_server = server


if __name__ == "__main__":
    serve(sys.argv[1])
