"""Fixtures of the operator's end-to-end tests: the session's local cluster (real
control plane + node agent running real trainer processes) with the CRDs installed and
the real operator running as a subprocess (`e2e`: a harness.Env), an undisturbed run of
SEARCH (`reference`), and the chart's admission policy applied (`policy`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import admission
from tests.e2e.harness import SESSION_PRIORITY, Env, Kubectl, Operator
from tests.localcluster.cluster import LocalCluster
from tests.localcluster.controlplane import ControlPlane


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


@pytest.fixture(scope="module")
def policy(kubectl: Kubectl, control_plane: ControlPlane) -> Iterator[Kubectl]:
    """The chart's admission policy (tests/e2e/admission.py) with its example limits, in
    force once this returns; removed after the module."""
    ns_labels = (
        (admission.PARAMS_NAMESPACE, {}),
        (admission.TENANT, {admission.SELECTOR_LABEL: "on"}),
        (admission.OUTSIDE, {}),
    )
    for ns, labels in ns_labels:
        kubectl.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}
        )
    kubectl("apply", "-f", "-", input=admission.render(control_plane, *admission.LIMITS))
    name = admission.NAME
    try:
        status = kubectl.json("get", "validatingadmissionpolicy", name).get("status") or {}
        assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status
        first = admission.job("first", image="docker.io/library/python:3.12")
        stderr = admission.wait_rejected(kubectl, first)
        assert 'spec.image "docker.io/library/python:3.12" is not allowed' in stderr, stderr
        yield kubectl
    finally:
        kubectl("delete", "validatingadmissionpolicybinding", name, check=False)
        kubectl("delete", "validatingadmissionpolicy", name, check=False)
        kubectl(
            "delete", "namespace", admission.TENANT, admission.OUTSIDE,
            admission.PARAMS_NAMESPACE, "--wait=false", check=False,
        )  # fmt: skip
