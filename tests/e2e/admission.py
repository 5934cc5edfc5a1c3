"""The chart's TuningJob admission policy (admission.enabled) as the e2e tests apply it:
rendered from the chart with example limits; the binding selects only the namespaces
labelled SELECTOR_LABEL, so the TuningJobs of the other tests sharing the session's
cluster are not judged. The `policy` fixture (tests/e2e/conftest.py) applies it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.harness import Kubectl, sample
from tests.localcluster import tools
from tests.localcluster.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tuneop"
RELEASE = "tuneop-vap"
PARAMS_NAMESPACE = "tuneop-vap-system"
TENANT = "tuneop-vap-tenant"
OUTSIDE = "tuneop-vap-outside"
SELECTOR_LABEL = "tuneop-e2e/admission"
NAME = f"{RELEASE}-tuningjob-limits"
ALLOWED_IMAGE = "registry.example.com/ml/trainer:0.1.0"
LIMITS = [
    "admission.enabled=true",
    "admission.allowedImages={registry.example.com/ml/,ghcr.io/acme/}",
    "admission.allowedPriorityClasses={tuneop-preemptible}",
    "admission.maxGpusPerJob=4",
    "admission.allowedTolerationKeys={example.com/spot}",
    f"admission.namespaceSelector.matchLabels.{SELECTOR_LABEL}=on",
]
TEMPLATES = ("admission-policy.yaml", "admission-binding.yaml", "admission-params.yaml")


def render(cp: ControlPlane, *sets: str) -> str:
    """The policy, its binding and its params ConfigMap as helm renders them."""
    cmd = [str(cp.bin_dir / "helm"), "template", RELEASE, str(CHART), "-n", PARAMS_NAMESPACE]
    cmd += tools.helm_kube_version()
    for template in TEMPLATES:
        cmd += ["--show-only", f"templates/{template}"]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def job(name: str, **spec: Any) -> dict[str, Any]:
    """The sample TuningJob in the judged namespace, of an allowed image."""
    return sample(name, TENANT, **{"image": ALLOWED_IMAGE, **spec})


def create(kubectl: Kubectl, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kubectl("create", "-f", "-", input=yaml.safe_dump(obj), check=False)


def policy_rejected(kubectl: Kubectl, obj: dict[str, Any]) -> str:
    """What the API server says refusing to create `obj` by the policy (not by the CRD's
    schema); AssertionError if it creates it."""
    result = create(kubectl, obj)
    assert result.returncode != 0, f"admitted: {obj['spec']}"
    assert NAME in result.stderr, result.stderr  # denied by the policy, not by the schema
    return result.stderr


def wait_rejected(kubectl: Kubectl, obj: dict[str, Any], timeout: float = 90) -> str:
    """A policy takes effect once the API server has compiled it and cached the binding
    and its params: until then a create may still pass (then it is deleted again)."""
    deadline = time.monotonic() + timeout
    while True:
        result = create(kubectl, obj)
        if result.returncode != 0 and NAME in result.stderr:
            return result.stderr
        if result.returncode == 0:
            kubectl("delete", "tj", obj["metadata"]["name"], "-n", TENANT, "--wait=false")
        if time.monotonic() > deadline:
            raise AssertionError(f"not rejected within {timeout:.0f}s: {result.stderr}")
        time.sleep(1)
