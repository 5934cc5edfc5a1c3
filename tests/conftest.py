"""Shared fixtures: ``control_plane``, one real local control plane per test session.

It is started lazily by the first test that asks for it and always stopped at the end
of the session, also on Ctrl-C or SIGTERM; an atexit hook in controlplane.py and
PR_SET_PDEATHSIG on every component are the safety nets if pytest itself dies.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import FrameType

import pytest

from tests.localcluster.controlplane import ControlPlane


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"))

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")  # unwinds into the finally below

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        cp.start()
        pids = cp.pids
        yield cp
    finally:
        cp.stop()
        signal.signal(signal.SIGTERM, previous)
    assert cp.leftover_pids(pids) == [], "control plane processes left behind"


# The `cluster` fixture: control plane + node agents + local-path volumes (nodeagent/).
from tests.localcluster.cluster import cluster  # noqa: E402, F401

# The `kueue` fixture: Kueue's manager on the control plane, started only when asked for.
from tests.localcluster.kueue import kueue  # noqa: E402, F401


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
