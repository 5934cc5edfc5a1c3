"""Fixtures shared by the unit tests: ``promtool``."""

from __future__ import annotations

import pytest

from tests.prometheus_server import prometheus_tool


@pytest.fixture(scope="module")
def promtool() -> str:
    """Debian's promtool (installed by hack/prometheus.sh when missing)."""
    return prometheus_tool("promtool")
