"""Container launcher of the local node agent (TEST INFRASTRUCTURE, not product).

Run as ``python -S launch.py <spec.json>`` (or ``python -m
tests.localcluster.nodeagent.launch <spec.json>``), or called in a process forked from
the agent's Python fork server (tests/forkserver.py): :func:`isolate` gives the process
private mount and UTS namespaces (what ``unshare --mount --uts --propagation private``
does), then :func:`enter`, inside the fresh, private mount namespace, bind-mounts every
``{"source", "target", "readOnly"}`` of the spec (creating missing mount points, which
it records in ``createdPaths`` so the agent can remove them later), sets the hostname,
changes to ``workingDir`` and execs ``argv`` with ``env``. The exec keeps the pid, so
the agent's SIGTERM reaches the container's process itself. Nothing mounted here is
visible outside the namespace, and the namespace disappears with its last process.
Standard library only (runs with -S).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import sys
from typing import Any

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
PR_SET_PDEATHSIG = 1


def isolate() -> None:
    """What `unshare --mount --uts --propagation private` does, in this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS | CLONE_NEWUTS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"making / private: {os.strerror(err)}")


def _mount(libc: ctypes.CDLL, source: str, target: str, flags: int) -> None:
    if libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _make_mountpoint(source: str, target: str, created: list[str]) -> None:
    if os.path.lexists(target):
        return
    parent = os.path.dirname(target)
    missing = []
    while parent and not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    created.extend(reversed(missing))
    if os.path.isdir(source):
        try:
            os.mkdir(target)
        except FileExistsError:  # another pod's launcher was faster
            return
    else:
        with open(target, "a"):
            pass
    created.append(target)


def enter(spec: dict[str, Any]) -> None:
    """Mount the spec's volumes, set its hostname and change to its working directory
    (in the private namespaces :func:`isolate` made)."""
    libc = ctypes.CDLL(None, use_errno=True)
    created: list[str] = []
    mounts = spec.get("mounts", [])
    # Resolve every source (and the record file) before the first mount: a volume at,
    # say, /tmp would otherwise hide the host paths that later sources live under.
    fds = [os.open(m["source"], os.O_PATH | os.O_CLOEXEC) for m in mounts]
    record = open(spec["createdPaths"], "a") if spec.get("createdPaths") else None  # noqa: SIM115
    try:
        for mount, fd in zip(mounts, fds, strict=True):
            source, target = f"/proc/self/fd/{fd}", mount["target"]
            _make_mountpoint(source, target, created)
            _mount(libc, source, target, MS_BIND | MS_REC)
            if mount.get("readOnly"):
                _mount(libc, source, target, MS_BIND | MS_REMOUNT | MS_RDONLY)
    finally:
        if record is not None:
            with record:
                record.write("".join(p + "\n" for p in created))
        for fd in fds:
            os.close(fd)
    if spec.get("hostname"):
        with contextlib.suppress(OSError):
            socket.sethostname(spec["hostname"])
    os.chdir(spec.get("workingDir") or "/")


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        spec = json.load(f)
    libc = ctypes.CDLL(None, use_errno=True)
    # Die with the agent thread that started us (safety net if the agent is killed).
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    isolate()
    enter(spec)
    args = spec["argv"]
    os.execvpe(args[0], args, spec["env"])
    return 127  # not reached


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except OSError as exc:
        print(f"tuneop node agent: cannot start container: {exc}", file=sys.stderr)
        sys.exit(128)
