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
SECOND_CLUSTER = (
    "tests/e2e/test_operator_parallel.py",
    "tests/e2e/test_queue.py",
    "tests/e2e/test_prometheus_alerts.py",
    "tests/e2e/test_operator_oom.py",
    "tests/e2e/test_demo.py",
    "tests/localcluster/test_disruption.py",
    "tests/localcluster/test_nodeagent.py",
    "tests/localcluster/test_kueue.py",
    "tests/localcluster/test_controlplane.py",
)
"""The cluster's tests in the second lane (Kueue's and Prometheus's among them, so only
it starts them); the others, and every module not named here, in the first."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """How `make test` shares the suite among its pytest-xdist workers: the tests of the
    local cluster's directories in two lanes of about the same length, each run whole by
    one worker on a cluster of its own (started once, its own pod network: see
    tests/localcluster/pytest_plugin.py), so neither lane is longer than the suite's
    share of a worker; every other module whole in one worker (its module-scoped
    reference runs computed once); the groups with the most tests first."""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            if not path.startswith(_CLUSTER_DIRS):
                return path
            return "cluster-2" if path in SECOND_CLUSTER else "cluster-1"

    return SuiteScheduling(config, log)
