"""Shared fixtures: ``control_plane``, one real local control plane per test session.

It is started lazily by the first test that asks for it and always stopped at the end
of the session, also on Ctrl-C or SIGTERM; an atexit hook in controlplane.py and
PR_SET_PDEATHSIG on every component are the safety nets if pytest itself dies.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
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
