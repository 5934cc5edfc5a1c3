"""The node agent's emulation of a container memory limit (there are no cgroups here).

The kubelet puts each container in a memory cgroup of `resources.limits.memory`; past it
the kernel's OOM killer SIGKILLs a process and the kubelet reports the container
terminated with exit code 137 and reason OOMKilled. Here a watchdog samples, on every
tick of the pod worker (twice a second), the resident memory of the container's process
group (the agent starts each container in a session of its own) and, past the limit,
SIGKILLs the whole group and reports exactly that: exit 137, reason OOMKilled.

What differs from a cgroup, and is accepted: memory is sampled, so an allocation can pass
the limit by whatever it adds in half a second before the kill; shared pages count once
per process (RSS, not the cgroup's charge); page cache is not counted; a process that
leaves the container's process group (setsid) escapes the limit. A container forked from
the agent's Python fork server (tests/forkserver.py) counts only its private memory (what
it allocated or wrote since the fork): the pages it still shares with the server, the
modules imported before the fork, are not charged to it, as they would not be to a small
`python -c` in a fresh interpreter (a fresh trainer would count its few hundred MB of
TensorFlow as well).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .podspec import quantity

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
OOM_EXIT_CODE = 137  # 128 + SIGKILL, as the kubelet reports an OOM-killed container
OOM_REASON = "OOMKilled"


def memory_limit(container: Mapping[str, Any]) -> int | None:
    """`resources.limits.memory` in bytes, or None (no limit)."""
    value = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return int(quantity(value)) if value not in (None, "") else None


def private_bytes(pid: int, proc: Path = Path("/proc")) -> int:
    """Resident memory of `pid` that no other process maps (Private_Clean + _Dirty)."""
    total = 0
    with open(proc / str(pid) / "smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


def group_rss(pgid: int, proc: Path = Path("/proc"), private: bool = False) -> int:
    """Resident bytes of every process in process group `pgid` (with `private`: each
    process's private bytes only)."""
    total = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        # the command name (field 2) may hold spaces and parentheses: split after it
        fields = stat[stat.rfind(")") + 2 :].split()
        # fields[0] is field 3 (state): pgrp is field 5, rss (pages) field 24
        if int(fields[2]) != pgid:
            continue
        if not private:
            total += int(fields[21]) * PAGE_SIZE
            continue
        try:
            total += private_bytes(int(entry.name), proc)
        except OSError:  # exited meanwhile
            continue
    return total


def over_limit(
    pgid: int, limit: int | None, proc: Path = Path("/proc"), private: bool = False
) -> int | None:
    """The group's resident bytes (`private`: see :func:`group_rss`) when past `limit`,
    else None."""
    if limit is None:
        return None
    rss = group_rss(pgid, proc, private)
    return rss if rss > limit else None
