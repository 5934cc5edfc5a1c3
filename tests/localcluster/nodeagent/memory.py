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
leaves the container's process group (setsid) escapes the limit.
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


def group_rss(pgid: int, proc: Path = Path("/proc")) -> int:
    """Resident bytes of every process in process group `pgid`."""
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
        if int(fields[2]) == pgid:
            total += int(fields[21]) * PAGE_SIZE
    return total


def over_limit(pgid: int, limit: int | None, proc: Path = Path("/proc")) -> int | None:
    """The group's resident bytes when past `limit`, else None."""
    if limit is None:
        return None
    rss = group_rss(pgid, proc)
    return rss if rss > limit else None
