"""Shared fixtures: the local cluster's ``control_plane``, ``cluster`` and ``kueue`` (the
plugin :mod:`tests.localcluster.pytest_plugin`, one of each per session, started by the
first test that asks for it) and ``tmpfs``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

pytest_plugins = ["tests.localcluster.pytest_plugin"]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Callable[[str], AbstractContextManager[Path]]:
    """`with tmpfs("1m") as mount:` a real size-limited tmpfs under tmp_path (needs root,
    as on the test machines: a disk that fills up, without filling the machine's)."""

    @contextmanager
    def mounted(size: str) -> Iterator[Path]:
        mount = tmp_path / f"tmpfs-{size}"
        mount.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True
        )
        try:
            yield mount
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=True)

    return mounted


_CLUSTER_FIXTURES = {"control_plane", "cluster", "kueue"}
_CLUSTER_DIRS = ("tests/e2e/", "tests/localcluster/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """How `make test` shares the suite among its pytest-xdist workers (`--dist
    loadgroup`): the tests on the session's local cluster all in one worker (one
    cluster, started once), every other module in one worker (its module-scoped
    reference runs computed once)."""
    for item in items:
        path = item.nodeid.split("::")[0]
        uses_cluster = bool(_CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())))
        # (some tests there start cluster processes of their own)
        group = "cluster" if uses_cluster or path.startswith(_CLUSTER_DIRS) else path
        item.add_marker(pytest.mark.xdist_group(group))
