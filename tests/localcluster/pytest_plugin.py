"""The local cluster's pytest fixtures, one of each per test session (registered by
tests/conftest.py through ``pytest_plugins``):

- ``control_plane``: a :class:`~tests.localcluster.controlplane.ControlPlane`;
- ``cluster``: a :class:`~tests.localcluster.cluster.LocalCluster` on it (node agents and
  local-path volumes);
- ``kueue``: :class:`~tests.localcluster.kueue.Kueue`'s manager on it;
- ``real_node`` (per module): a real node (:mod:`tests.localcluster.kubelet`) in ``cluster``.

Each is started lazily by the first test that asks for it and always stopped at the end
of the session, also on Ctrl-C or SIGTERM; the atexit hooks of controlplane.py,
cluster.py and kueue.py and PR_SET_PDEATHSIG on the processes they start are the safety
nets if pytest itself dies. After its stop each fixture checks that no process (or mount)
it started is left behind.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from tests.localcluster import tools
from tests.localcluster.cluster import LocalCluster
from tests.localcluster.controlplane import ControlPlane
from tests.localcluster.kubelet.node import KubeletNode, real_node_config
from tests.localcluster.kueue import Kueue
from tests.localcluster.nodeagent.agent import POD_NETWORK_ENV


def pytest_configure(config: pytest.Config) -> None:
    """The session's cluster gets a pod network of its own (127.<N+1>.x.y under
    pytest-xdist worker gwN, else 127.1.x.y), apart from `make demo`'s and `make
    cluster-up`'s (127.0.x.y), so clusters running at once never give two pods one
    address and port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    os.environ.setdefault(POD_NETWORK_ENV, str(1 + index % 254))


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The session's control plane."""
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


@pytest.fixture(scope="session")
def cluster(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """The session's local cluster: control plane + node agent(s) + local-path volumes;
    its Python containers forked from a server with TensorFlow imported (the suite starts
    a few hundred trainer pods)."""
    lc = LocalCluster(control_plane, tmp_path_factory.mktemp("cluster"), fork_python=True)
    lc.start()
    try:
        yield lc
    finally:
        lc.stop()
    assert lc.leftovers() == [], "local cluster left processes or mounts behind"


@pytest.fixture(scope="session")
def kueue(control_plane: ControlPlane) -> Iterator[Kueue]:
    """Kueue on the session's control plane, started by the first test that asks."""
    k = Kueue(control_plane, kueue_dir=tools.kueue_dir())
    k.start()
    pid = k.pid
    try:
        yield k
    finally:
        k.stop()
    assert pid is not None and control_plane.leftover_pids([pid]) == [], "kueue left behind"


@pytest.fixture(scope="module")
def real_node(cluster: LocalCluster) -> Iterator[KubeletNode]:
    """A real node (containerd, runc, the kubelet) in the session's cluster for one
    module, with the CPU trainer and operator images; tainted (``TOLERATION`` in
    kubelet/node.py), so only pods that ask land there. Removed after the module,
    leaving nothing behind."""
    node = cluster.add_real_node(real_node_config("trainer-cpu", "operator"))
    try:
        yield node
    finally:
        cluster.remove_real_node(node.config.name)
    assert node.leftovers() == [], "real node left processes, mounts or its bridge behind"
