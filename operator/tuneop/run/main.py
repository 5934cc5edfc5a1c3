"""Entry point: `python -m tuneop` (or the `tuneop` script). Reads the Config, serves
metrics, makes sure the kopf peering object exists, then runs kopf: one active replica
at a time (peering), liveness at :8081/healthz."""

from __future__ import annotations

import argparse
import logging
import sys

import kopf
import kubernetes

from ..act import kube
from ..act.fence import Fence
from . import handlers as _handlers  # registers the handlers
from . import metrics
from .config import KOPF_HANDLER_CONNECTIONS, PREFIX, Config, ConfigError
from .runtime import Runtime

del _handlers

log = logging.getLogger("tuneop")


def ensure_peering(client: kube.Kube, name: str) -> None:
    """Create the cluster-wide kopf peering object (the CRDs come from
    manifests/crd/kopf-peering.yaml)."""
    body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    try:
        client.request("POST", "/apis/kopf.dev/v1/clusterkopfpeerings", body)
    except kube.ApiError as err:
        if err.status == 409:
            return
        if err.status == 404:
            raise SystemExit(
                "tuneop: the kopf peering CRDs are missing: "
                "kubectl apply -f manifests/crd/kopf-peering.yaml (or set TUNEOP_OPERATOR_PEERING=)"
            ) from err
        raise


class _QuietPodEvents(logging.Filter):
    """kopf logs every successful handler call; the pod and job watches would flood
    the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(f"Handler '{h}' succeeded" in message for h in ("pod_event", "job_event"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """No options: the operator is configured by environment variables (as the chart's
    Deployment sets them); `--help` says so."""
    parser = argparse.ArgumentParser(
        prog="python -m tuneop",
        description="The tuneop operator: runs TuningJobs (tuneop.io/v1alpha1) as trainer "
        "pods. Credentials: in-cluster, else $KUBECONFIG or ~/.kube/config.",
        epilog=f"Configured by {PREFIX}* environment variables "
        "(docs/operator-guide.md, operator/tuneop/run/config.py).",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    parse_args(argv)
    try:
        config = Config.from_env()
    except ConfigError as err:
        print(f"tuneop: invalid configuration: {err}", file=sys.stderr)
        return 2
    try:
        credentials = kube.load_config()
    except kubernetes.config.ConfigException as err:
        print(f"tuneop: no cluster credentials (in-cluster or kubeconfig): {err}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kopf.objects").addFilter(_QuietPodEvents())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # one kept-alive connection per thread that calls the API (urllib3 discards a
    # connection beyond its pool's size after each request, and the next one handshakes)
    credentials.connection_pool_maxsize = config.pass_threads + KOPF_HANDLER_CONNECTIONS
    client = kube.Kube(credentials, timeout=config.request_timeout_seconds, fence=Fence())
    metrics.register()
    if config.peering_name:
        metrics.follow_peering()  # a standby replica exports no job series
    metrics.serve(config.metrics_port)
    if config.peering_name and not config.namespaces:
        # cluster-wide mode; with watched namespaces kopf uses the KopfPeering in each
        # of them (the chart creates those)
        ensure_peering(client, config.peering_name)
    log.info(
        "tuneop starting: namespaces=%s peering=%s priority=%d",
        ",".join(config.namespaces) or "<all>",
        config.peering_name or "<standalone>",
        config.priority,
    )
    kopf.run(
        standalone=not config.peering_name,
        peering_name=config.peering_name or None,
        priority=config.priority,
        clusterwide=not config.namespaces,
        namespaces=config.namespaces,
        liveness_endpoint=(
            f"http://0.0.0.0:{config.health_port}/healthz" if config.health_port else None
        ),
        memo=kopf.Memo(runtime=Runtime(config, client)),
    )
    return 0
