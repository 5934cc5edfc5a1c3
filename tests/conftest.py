"""Shared fixtures: the local cluster's ``control_plane``, ``cluster`` and ``kueue`` (the
plugin :mod:`tests.localcluster.pytest_plugin`, one of each per session, started by the
first test that asks for it) and ``tmpfs``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

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


_CLUSTER_DIRS = ("tests/e2e/", "tests/localcluster/")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """How `make test` shares the suite among its pytest-xdist workers: the tests of
    the local cluster's directories all in one worker (they share one cluster, started
    once), every other module whole in one worker (its module-scoped reference runs
    computed once); the largest groups first."""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            return "cluster" if path.startswith(_CLUSTER_DIRS) else path

    return SuiteScheduling(config, log)
