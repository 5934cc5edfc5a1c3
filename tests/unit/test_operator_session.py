"""kopf's session to the API server (tuneop.run.session): kopf's credentials, a bounded
connection pool with room for every watch stream."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import kopf
import pytest
from kubernetes.config import kube_config
from tuneop.run import session

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team-a}}]
current-context: x
"""


def test_the_pool_holds_every_watch_stream_and_room_for_requests():
    cluster_wide = session.connection_limit(0)
    assert cluster_wide - session.REQUESTS_IN_FLIGHT >= 5  # jobs, pods, maps, nodes, peering
    ten = session.connection_limit(10)
    assert ten - session.REQUESTS_IN_FLIGHT >= 10 * 4 + 1  # four per namespace, and nodes


def test_the_session_carries_kopfs_credentials_on_a_bounded_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    # read when the client library was imported, as $KUBECONFIG
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    async def login() -> tuple[kopf.AiohttpSession | None, int, str]:
        made = await session.bounded_session(logging.getLogger("t"), kopf.OperatorSettings(), 3)
        assert made is not None
        http = made.aiohttp_session
        limit, auth = http.connector.limit, http.headers["Authorization"]  # type: ignore[union-attr]
        await http.close()
        return made, limit, auth

    made, limit, auth = asyncio.run(login())
    assert made is not None and made.server == "https://127.0.0.1:6443"
    assert limit == session.connection_limit(3)
    assert auth == "Bearer secret-token"
