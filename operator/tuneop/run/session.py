"""kopf's HTTP session to the API server, with a bounded number of connections.

kopf's own session opens a new TLS connection for every request in flight, without
limit. When thousands of TuningJobs are new to the operator at once (a cold start, a
take-over, a burst of submissions), kopf writes its finalizer and annotations on each
at the same moment: measured over 2,000 new jobs, about a thousand connections were
open together, each holding a 256 KiB TLS buffer (249 MiB at the peak) and costing a
handshake to both ends. Bounded, the writes wait their turn for a connection that is
kept alive, and memory no longer grows with the number of jobs that arrive together.

The credentials are kopf's own (`kopf.login_via_client`: in-cluster, else the
kubeconfig); only the connection pool is ours. kopf closes the session when it logs in
again (an expired token)."""

from __future__ import annotations

from typing import Any

import aiohttp
import kopf

WATCHES_PER_NAMESPACE = 4
"""Watch streams the operator holds open per watched namespace (TuningJobs, pods,
progress ConfigMaps, the namespace's KopfPeering); each holds its connection."""
CLUSTER_WATCHES = 2
"""Cluster-wide streams: Nodes, and the ClusterKopfPeering."""
REQUESTS_IN_FLIGHT = 32
"""Connections for requests beyond the watches: kopf's patches and Events."""


def connection_limit(namespaces: int) -> int:
    """Connections for `namespaces` watched namespaces (0: cluster-wide, one stream per
    resource): every watch stream keeps one, and REQUESTS_IN_FLIGHT more."""
    streams = WATCHES_PER_NAMESPACE * max(namespaces, 1) + CLUSTER_WATCHES
    return streams + REQUESTS_IN_FLIGHT


async def bounded_session(
    logger: Any, settings: kopf.OperatorSettings, namespaces: int
) -> kopf.AiohttpSession | None:
    """kopf's login (its credentials), on a session of at most `connection_limit`
    connections. Async: aiohttp wants its session made on the loop it runs on."""
    info = kopf.login_via_client(logger=logger, settings=settings)
    if info is None:
        return None
    connector = aiohttp.TCPConnector(limit=connection_limit(namespaces), ssl=info.as_ssl_context())
    session = aiohttp.ClientSession(
        connector=connector,
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
    return kopf.AiohttpSession(
        aiohttp_session=session,
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
    )
