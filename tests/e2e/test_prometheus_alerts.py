"""TuneopJobStalled fires end to end: Debian's prometheus scrapes the real operator of the
session (its /metrics port) under the scrape job the rules expect, evaluates the chart's
own rules, and `/api/v1/alerts` shows the alert firing for each stuck job with the job's
labels and the Stalled condition's reason (label reason); a job that is not stuck has its
series scraped and no alert.

The rules are the chart's, rendered by helm with one value changed:
prometheusRule.jobStalled.for is 2s instead of 1m. The jobs cross their thresholds fast
through their own spec (pendingTimeoutSeconds 10, stallTimeoutSeconds 30, the CRD's
minimums), Prometheus scrapes and evaluates every second, and all reasons run at once in
one Prometheus, so the module costs about one stall timeout.

Reasons produced here, concurrently:
- Unschedulable: eight GPUs on a node that has four (the real kube-scheduler says so);
- CreateContainerConfigError: env from a key of a ConfigMap that does not exist (the
  node agent resolves env like the kubelet and reports that waiting reason);
- PodRejected: a ResourceQuota of zero GPUs refuses the pods at the API server;
- NoProgress: a trainer that started and then hangs, its processes stopped with SIGSTOP
  (no training runs, so no TensorFlow work is spent);
- TerminatingOnUnreachableNode: the trainer's node (one added for it) crashes, the taint
  manager evicts the pod, which cannot finish terminating on a node that is gone.
Not produced here:
- ImagePullBackOff/ErrImagePull: the node agent pulls no images (tests/localcluster);
  the operator's classification of the waiting reason is unit-tested.
- Backoff: it needs a trainer that fails and the failure's retry wait to outlast
  pendingTimeoutSeconds (a real failing trainer, seconds of TensorFlow start-up each);
  its condition is covered by unit scenarios.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tuneop.api import names

from tests.e2e.harness import Env, condition, wait_for
from tests.localcluster import disruption, tools
from tests.localcluster.nodeagent.agent import NodeConfig
from tests.prometheus_server import Prometheus

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tuneop"
LOST_NODE = "alert-node"
OPERATOR_JOB = "tuneop-metrics"
"""The scrape job name the plain rules file expects (the metrics Service of release tuneop)."""


def render_rules(helm: Path, out: Path) -> Path:
    """The chart's PrometheusRule spec as a plain rules file, TuneopJobStalled's `for`
    shortened through the chart's value."""
    rendered = subprocess.run(
        [
            str(helm), "template", "tuneop", str(CHART), "--namespace", "tuneop-system",
            "--show-only", "templates/prometheusrule.yaml",
            "--set", "prometheusRule.enabled=true",
            "--set", "prometheusRule.jobStalled.for=2s", *tools.helm_kube_version(),
        ],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    spec = yaml.safe_load(rendered)["spec"]
    (rule,) = [
        r for g in spec["groups"] for r in g["rules"] if r.get("alert") == "TuneopJobStalled"
    ]
    assert rule["for"] == "2s", rule
    out.write_text(yaml.safe_dump(spec))
    return out


@pytest.fixture(scope="module")
def prometheus(e2e: Env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    workdir = tmp_path_factory.mktemp("prometheus")
    rules = render_rules(e2e.cluster.control_plane.bin_dir / "helm", workdir / "rules.yaml")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": OPERATOR_JOB,
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{e2e.operator.metrics_port}"]}],
            }
        ],
    }
    prom = Prometheus(config, workdir)  # scraping the operator every second
    try:
        yield prom
    finally:
        prom.stop()


def trainer_pid(e2e: Env, namespace: str, pod: str) -> int:
    """The trainer container's process, once the node agent runs it."""

    def running() -> int | None:
        for agent in e2e.cluster.agents.values():
            for worker in list(agent.workers.values()):
                if (worker.namespace, worker.pod_name) != (namespace, pod):
                    continue
                run = worker.find(names.TRAINER_CONTAINER)
                if run is not None and run.running and run.proc is not None:
                    return int(run.proc.pid)
        return None

    return wait_for(running, 90, f"the trainer of {namespace}/{pod} running")


def stop_trainer(e2e: Env, namespace: str, pod: str) -> int:
    """SIGSTOP the trainer's process group: the pod stays Running, the trainer never
    reports progress and uses no CPU."""
    pid = trainer_pid(e2e, namespace, pod)
    os.killpg(pid, signal.SIGSTOP)
    return pid


def firing(prom: Prometheus, alert: str) -> dict[str, dict[str, Any]]:
    """Firing alerts named `alert` by namespace."""
    return {
        a["labels"].get("namespace", ""): a
        for a in prom.alerts()
        if a["labels"].get("alertname") == alert and a["state"] == "firing"
    }


def test_each_stuck_reason_fires_tuneop_job_stalled(e2e: Env, prometheus: Prometheus):
    expected: dict[str, str] = {}
    # a node of its own for the job whose node is lost; the others stay off it
    home = {"kubernetes.io/hostname": e2e.cluster.node().name}
    e2e.cluster.add_node(NodeConfig(name=LOST_NODE, gpus=0))
    stopped: list[int] = []
    submitted: list[str] = []

    def stuck_job(prefix: str, quota: bool = False, **spec: Any) -> str:
        ns = e2e.namespace(prefix)
        submitted.append(ns)
        if quota:
            e2e.quota(ns, "no-gpus", {"requests.nvidia.com/gpu": "0"})
        e2e.submit(ns, **spec)
        return ns

    try:
        lost = stuck_job(
            "alert-lost",
            distribution={"gpusPerWorker": 0},
            nodeSelector={"kubernetes.io/hostname": LOST_NODE},
            pendingTimeoutSeconds=10,
            # judged from when the evicted pod was due to be gone: its grace period's end
            terminationGracePeriodSeconds=5,
        )
        expected[lost] = "TerminatingOnUnreachableNode"
        # the local node has 4 GPUs
        unsched = stuck_job(
            "alert-unsched",
            distribution={"gpusPerWorker": 8},
            nodeSelector=home,
            pendingTimeoutSeconds=10,
        )
        expected[unsched] = "Unschedulable"
        env = [{"name": "DATA", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}]
        config = stuck_job("alert-config", env=env, nodeSelector=home, pendingTimeoutSeconds=10)
        expected[config] = "CreateContainerConfigError"
        quota = stuck_job("alert-quota", quota=True, pendingTimeoutSeconds=10)
        expected[quota] = "PodRejected"
        hung = stuck_job(
            "alert-hung",
            distribution={"gpusPerWorker": 0},
            nodeSelector=home,
            stallTimeoutSeconds=30,
            terminationGracePeriodSeconds=5,
        )
        expected[hung] = "NoProgress"
        # running and quiet too, but within its (default, 900 s) stall timeout
        healthy = stuck_job(
            "alert-healthy",
            distribution={"gpusPerWorker": 0},
            nodeSelector=home,
            terminationGracePeriodSeconds=5,
        )
        stopped += [stop_trainer(e2e, ns, "search-worker-0") for ns in (hung, healthy)]
        # the node's kubelet dies with the trainer: Ready turns Unknown, the taint manager
        # evicts the pod, which cannot finish terminating there
        trainer_pid(e2e, lost, "search-worker-0")
        disruption.crash_node(e2e.cluster, LOST_NODE)
        alerts = wait_for(
            lambda: (f := firing(prometheus, "TuneopJobStalled")).keys() >= expected.keys() and f,
            120,
            f"TuneopJobStalled firing for {sorted(expected)}",
            every=1.0,
        )
        for ns, reason in expected.items():
            labels = alerts[ns]["labels"]
            assert labels["tuningjob"] == "search" and labels["severity"] == "warning", labels
            assert labels["reason"] == reason, labels
            assert f"Stalled ({reason})" in alerts[ns]["annotations"]["summary"]
            assert alerts[ns]["annotations"]["runbook_url"].endswith("#tuneopjobstalled")
            status = e2e.status(ns)
            assert condition(status, "Stalled")["status"] == "True", status
            assert condition(status, "Stalled")["reason"] == reason, status
        assert e2e.status(healthy)["phase"] == "Running"
        assert condition(e2e.status(healthy), "Stalled").get("status") != "True"
        # the healthy job is scraped (its gauge is 0), so its silence means something
        stalled = prometheus.get(
            f"query?query=tuneop_tuningjob_stalled%7Bnamespace%3D%22{healthy}%22%7D"
        )["result"]
        assert [r["value"][1] for r in stalled] == ["0"], stalled
        for alert in prometheus.alerts():
            assert alert["labels"].get("namespace") != healthy, alert
        # only TuneopJobStalled for these jobs: none failed, none reported progress
        # (TuneopTrialStalled and TuneopCheckpointTooOld need some)
        ours = {
            a["labels"].get("alertname")
            for a in prometheus.alerts()
            if a["labels"].get("namespace") in expected and a["state"] == "firing"
        }
        assert ours == {"TuneopJobStalled"}, prometheus.alerts()
    finally:
        for ns in submitted:
            e2e.kubectl("delete", "tj", "search", "-n", ns, "--wait=false")
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)  # so the deletion's SIGTERM is handled
        e2e.cluster.remove_node(LOST_NODE)  # the pod GC then deletes its pod
