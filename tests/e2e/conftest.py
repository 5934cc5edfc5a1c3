"""Fixtures of the operator's end-to-end tests: the session's local cluster (real
control plane + node agent running real trainer processes) with the CRDs installed and
the real operator running as a subprocess."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Kubectl, Operator, claim_dir, sample, wait_for, wait_mid_epoch
from tests.localcluster.cluster import LocalCluster
from tests.localcluster.controlplane import ControlPlane

SEARCH = {
    # Long enough (about 20 steps an epoch) to be disrupted mid-trial after a checkpoint,
    # small enough for a couple of minutes on one CPU; deterministic so a disrupted run
    # can be compared with an undisturbed one.
    "data": {"synthetic": {"samples": 768, "seed": 0}, "validationSplit": 0.25},
    "tuner": {
        "algorithm": "Hyperband",
        "objective": {"name": "val_accuracy", "direction": "max"},
        "maxEpochs": 2,
        "factor": 2,
        "hyperbandIterations": 1,
        "seed": 7,
        "batchSize": 32,
        "deterministic": True,
    },
    "checkpoint": {"size": "1Gi", "intervalSteps": 3, "intervalSeconds": 30, "keep": 2},
    "resources": {},
    "terminationGracePeriodSeconds": 30,
}


STEPS_PER_EPOCH = 768 * 3 // 4 // 32  # training samples // batch size
SESSION_PRIORITY = 100
"""kopf peering priority of the session's operator."""


class Env:
    """What a test needs: kubectl, the operator process, the cluster."""

    def __init__(self, cluster: LocalCluster, kubectl: Kubectl, operator: Operator) -> None:
        self.cluster = cluster
        self.kubectl = kubectl
        self.operator = operator
        self._namespaces = 0

    def namespace(self, prefix: str) -> str:
        """A fresh namespace, ready for pods: its default ServiceAccount and the
        kube-root-ca.crt ConfigMap (the trainer's API access needs ca.crt) exist."""
        self._namespaces += 1
        ns = self.cluster.create_namespace(f"{prefix}-{self._namespaces}")
        wait_for(
            lambda: (
                self.kubectl("get", "cm", "kube-root-ca.crt", "-n", ns, check=False).returncode == 0
            ),
            60,
            f"kube-root-ca.crt in {ns}",
        )
        return ns

    def submit(self, namespace: str, name: str = "search", **spec: Any) -> dict[str, Any]:
        job = sample(name, namespace, **{**SEARCH, **spec})
        self.kubectl.apply(job)
        return job

    def job(self, namespace: str, name: str = "search") -> dict[str, Any]:
        job = self.kubectl.job(namespace, name)
        assert job is not None, f"TuningJob {namespace}/{name} not found"
        return job

    def status(self, namespace: str, name: str = "search") -> dict[str, Any]:
        return dict(self.job(namespace, name).get("status") or {})

    def wait_status(
        self, namespace: str, predicate: Any, timeout: float, what: str, name: str = "search"
    ) -> dict[str, Any]:
        try:
            return wait_for(
                lambda: (s := self.status(namespace, name)) and predicate(s) and s,
                timeout,
                what,
                every=1.0,
            )
        except TimeoutError as err:
            raise AssertionError(f"{err}\n{self.diagnose(namespace, name)}") from None

    def wait_phase(
        self, namespace: str, phase: str, timeout: float = 300, name: str = "search"
    ) -> dict[str, Any]:
        return self.wait_status(
            namespace, lambda s: s.get("phase") == phase, timeout, f"phase {phase}", name
        )

    def wait_mid_trial(
        self, namespace: str, name: str = "search", min_step: int = 2
    ) -> dict[str, Any]:
        """Until the trainer is mid-epoch in a trial after the first one (its own
        /progress endpoint; SEARCH has 18 steps an epoch)."""
        self.wait_phase(namespace, "Running", timeout=120, name=name)
        try:
            return wait_mid_epoch(self.kubectl, namespace, name, STEPS_PER_EPOCH, min_step=min_step)
        except (TimeoutError, AssertionError) as err:
            raise AssertionError(f"{err}\n{self.diagnose(namespace, name)}") from None

    def claim_dir(self, namespace: str, name: str = "search") -> Path:
        """The host directory behind the job's checkpoint claim."""
        return claim_dir(self.kubectl, namespace, name)

    def reasons(self, namespace: str, name: str = "search") -> list[str]:
        return [e["reason"] for e in self.kubectl.events(namespace, name)]

    def diagnose(self, namespace: str, name: str = "search") -> str:
        parts = []
        with contextlib.suppress(Exception):
            parts.append("status: " + json.dumps(self.status(namespace, name), indent=1))
        with contextlib.suppress(Exception):
            parts.append(self.kubectl("get", "pods,events", "-n", namespace).stdout)
        with contextlib.suppress(Exception):
            for pod in self.kubectl.pods(namespace, name):
                pod_name = pod["metadata"]["name"]
                logs = self.kubectl("logs", "-n", namespace, pod_name, check=False).stdout
                parts.append(f"--- logs {pod_name}:\n" + "\n".join(logs.splitlines()[-30:]))
        parts.append("--- operator log:\n" + self.operator.log_tail(40))
        return "\n".join(parts)


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane) -> Kubectl:
    k = Kubectl(control_plane.bin_dir / "kubectl", control_plane.kubeconfig)
    k.install_crds()
    return k


@pytest.fixture(scope="session")
def e2e(
    cluster: LocalCluster, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    log = Path(tmp_path_factory.mktemp("operator")) / "operator.log"
    # a low peering priority: a test's own replicas (tests/e2e/test_operator_failover.py)
    # outrank it, and it pauses while they run
    operator = Operator(
        cluster.control_plane.kubeconfig, log, TUNEOP_OPERATOR_PRIORITY=str(SESSION_PRIORITY)
    ).start()
    try:
        yield Env(cluster, kubectl, operator)
    finally:
        operator.stop()
        time.sleep(0.1)


@pytest.fixture(scope="session")
def reference(e2e: Env) -> dict[str, Any]:
    """Status of an undisturbed run of SEARCH (what disrupted runs must match)."""
    ns = e2e.namespace("reference")
    e2e.submit(ns)
    return e2e.wait_phase(ns, "Succeeded", timeout=400)
