"""The trainer tests' session: trainer processes forked from one server that has
TensorFlow imported (forkserver.py), stopped with the session; each module's and test's
logical devices from its `devices` mark (trainer_helpers.DEVICES)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trainer_helpers
from trainer_helpers import env

from tests import forkserver


@pytest.fixture(scope="session", autouse=True)
def trainer_fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    server = forkserver.ForkServer(tmp_path_factory.mktemp("forkserver"), env())
    forkserver.install(server)
    try:
        yield
    finally:
        forkserver.install(None)
        server.stop()


def _marked_devices(node: pytest.Item | pytest.Collector) -> int:
    mark = node.get_closest_marker("devices")
    return int(mark.args[0]) if mark is not None else 1


@pytest.fixture(scope="module", autouse=True)
def module_devices(request: pytest.FixtureRequest) -> Iterator[None]:
    """The module's mark, for its module-scoped reference runs."""
    trainer_helpers.DEVICES[0] = _marked_devices(request.node)
    yield
    trainer_helpers.DEVICES[0] = 1


@pytest.fixture(autouse=True)
def test_devices(request: pytest.FixtureRequest, module_devices: None) -> Iterator[None]:
    """The test's own mark (or its module's), for its body and function fixtures."""
    trainer_helpers.DEVICES[0] = _marked_devices(request.node)
    yield
    trainer_helpers.DEVICES[0] = _marked_devices(request.node.parent or request.node)
