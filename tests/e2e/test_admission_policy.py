"""The chart's TuningJob admission policy (admission.enabled) on the real API server.

The ValidatingAdmissionPolicy, its binding and its params ConfigMap are rendered from the
chart with example limits and applied (tests/e2e/admission.py, the `policy` fixture); the
binding selects only the namespaces labelled tuneop-e2e/admission=on, so the TuningJobs
of the other tests sharing the session's cluster are not judged. No operator runs here:
admission is the API server's alone.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.admission import (
    NAME,
    OUTSIDE,
    PARAMS_NAMESPACE,
    TENANT,
    create,
    job,
    policy_rejected,
)
from tests.e2e.harness import Kubectl, sample

pytestmark = pytest.mark.cluster


def test_policy_type_checks_without_warnings(policy: Kubectl) -> None:
    """The API server type-checks the expressions against the TuningJob schema and the
    ConfigMap params; a typo in a field name would show up here as a warning."""
    status = {}
    deadline = time.monotonic() + 30
    while "typeChecking" not in status and time.monotonic() < deadline:
        status = policy.json("get", "validatingadmissionpolicy", NAME).get("status") or {}
        time.sleep(0.5)
    assert status.get("typeChecking", {}).get("expressionWarnings") in (None, []), status


def test_disallowed_image_is_rejected_naming_the_field(policy: Kubectl) -> None:
    stderr = policy_rejected(policy, job("bad-image", image="docker.io/evil/miner:latest"))
    assert 'spec.image "docker.io/evil/miner:latest" is not allowed' in stderr, stderr
    assert "allowed prefixes: registry.example.com/ml/, ghcr.io/acme/" in stderr, stderr


def test_too_many_gpus_are_rejected_naming_the_fields(policy: Kubectl) -> None:
    distribution = {"strategy": "Auto", "workers": 2, "gpusPerWorker": 4}
    stderr = policy_rejected(policy, job("many-gpus", distribution=distribution))
    fields = "spec.parallelTrials x spec.distribution.workers x spec.distribution.gpusPerWorker"
    assert f"{fields} = 8 GPUs" in stderr, stderr
    # every trial group of a parallel job gets them
    distribution = {"strategy": "Auto", "workers": 1, "gpusPerWorker": 2}
    stderr = policy_rejected(
        policy, job("parallel-gpus", distribution=distribution, parallelTrials=3)
    )
    assert "= 6 GPUs" in stderr
    assert "more than the 4 allowed per TuningJob" in stderr, stderr
    # GPUs asked for through spec.resources instead are refused too.
    resources = {"limits": {"nvidia.com/gpu": 8}}
    distribution = {"strategy": "Auto", "workers": 1, "gpusPerWorker": 0}
    stderr = policy_rejected(
        policy, job("gpus-in-resources", distribution=distribution, resources=resources)
    )
    assert "spec.resources must not set nvidia.com/gpu" in stderr, stderr


def test_disallowed_priority_class_is_rejected(policy: Kubectl) -> None:
    stderr = policy_rejected(
        policy, job("high-priority", priorityClassName="system-cluster-critical")
    )
    assert 'spec.priorityClassName "system-cluster-critical" is not allowed' in stderr, stderr
    assert "allowed: tuneop-preemptible" in stderr, stderr


def test_disallowed_toleration_key_is_rejected(policy: Kubectl) -> None:
    tolerations = [
        {"key": "example.com/spot", "operator": "Exists"},
        {"operator": "Exists"},  # tolerates every taint
    ]
    stderr = policy_rejected(policy, job("tolerate-all", tolerations=tolerations))
    assert 'spec.tolerations key(s) "" (every taint) not allowed' in stderr, stderr


def test_allowed_job_is_accepted_and_stays_updatable(policy: Kubectl) -> None:
    allowed = job(
        "allowed",
        priorityClassName="tuneop-preemptible",
        distribution={"strategy": "Auto", "workers": 2, "gpusPerWorker": 2},
        tolerations=[{"key": "example.com/spot", "operator": "Exists", "effect": "NoSchedule"}],
    )
    result = create(policy, allowed)
    assert result.returncode == 0, result.stderr
    # Metadata updates (as kopf's finalizer patch) are not judged; nor are unchanged fields
    # on a spec change.
    policy("label", "tj", "allowed", "-n", TENANT, "team=ml")
    policy(
        "patch", "tj", "allowed", "-n", TENANT, "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    # Changing a judged field is judged.
    result = policy(
        "patch", "tj", "allowed", "-n", TENANT, "--type=merge",
        "-p", '{"spec":{"image":"docker.io/evil/miner:latest"}}', check=False,
    )  # fmt: skip
    assert result.returncode != 0 and "spec.image" in result.stderr, result.stderr


def test_namespaces_outside_the_selector_are_not_judged(policy: Kubectl) -> None:
    outside = sample("outside", OUTSIDE, image="docker.io/evil/miner:latest")
    result = create(policy, outside)
    assert result.returncode == 0, result.stderr


def test_limits_change_by_editing_the_params_configmap(policy: Kubectl) -> None:
    """No re-install: the admin edits the ConfigMap and the same policy applies it."""
    image = "quay.io/team/trainer:1"
    policy_rejected(policy, job("quay", image=image))
    patch = '{"data":{"allowedImages":"registry.example.com/ml/,quay.io/team/"}}'
    policy("patch", "configmap", NAME, "-n", PARAMS_NAMESPACE, "--type=merge", "-p", patch)
    try:
        deadline = time.monotonic() + 60
        while (result := create(policy, job("quay", image=image))).returncode != 0:
            assert time.monotonic() < deadline, result.stderr
            time.sleep(1)
    finally:
        patch = '{"data":{"allowedImages":"registry.example.com/ml/,ghcr.io/acme/"}}'
        policy("patch", "configmap", NAME, "-n", PARAMS_NAMESPACE, "--type=merge", "-p", patch)
