"""The trainer tests' session: trainer processes forked from one server that has
TensorFlow imported (forkserver.py), stopped with the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
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
