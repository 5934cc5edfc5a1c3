"""The API server itself rejects invalid TuningJobs (schema + CEL in the CRD)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from tests.e2e.harness import Kubectl, sample

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]


def rejected(kubectl: Kubectl, job: dict) -> str:
    result = kubectl(
        "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(job), check=False
    )
    assert result.returncode != 0, f"accepted: {job['spec']}"
    return result.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"data": {"synthetic": {}, "path": "/x.npz"}}, "exactly one of synthetic, path or loader"),
        (
            {"distribution": {"strategy": "Mirrored", "workers": 2}},
            "workers > 1 requires strategy MultiWorkerMirrored or Auto",
        ),
        (
            {"checkpoint": {"existingClaim": "mine", "size": "2Gi"}},
            "either existingClaim or size/storageClassName/accessModes",
        ),
        (
            {"failurePolicy": {"backoffSeconds": 60, "maxBackoffSeconds": 10}},
            "maxBackoffSeconds must be >= backoffSeconds",
        ),
        ({"hypermodel": "not a reference"}, "spec.hypermodel"),
        ({"tuner": {"algorithm": "Genetic"}}, "spec.tuner.algorithm"),
        ({"tuner": {"maxEpochs": 0}}, "spec.tuner.maxEpochs"),
        ({"distribution": {"gpusPerWorker": 99}}, "spec.distribution.gpusPerWorker"),
    ],
)
def test_invalid_specs_are_rejected_with_a_clear_message(kubectl, change, message):
    job = sample("bad", "default")
    job["spec"].update(change)
    assert message in rejected(kubectl, job)


def test_name_length_and_immutable_fields(kubectl):
    long_name = sample("x" * 46, "default")
    assert "at most 45 characters" in rejected(kubectl, long_name)
    job = sample("immutable", "default")
    kubectl.apply(job)
    try:
        changed = copy.deepcopy(job)
        changed["spec"]["tuner"]["maxEpochs"] = 5
        result = kubectl("apply", "-f", "-", input=yaml.safe_dump(changed), check=False)
        assert result.returncode != 0 and "tuner is immutable" in result.stderr
        changed = copy.deepcopy(job)
        changed["spec"]["suspend"] = True  # mutable
        kubectl.apply(changed)
    finally:
        kubectl("delete", "tj", "immutable", "-n", "default", "--wait=false")


def test_kubectl_explain_and_defaults(kubectl):
    explain = kubectl("explain", "tuningjob.spec.failurePolicy").stdout
    assert "maxPreemptions" in explain and "Budgets for trainer failures" in explain
    job = sample("defaults", "default")
    del job["spec"]["failurePolicy"], job["spec"]["tuner"]["factor"]
    out = kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(job)
    ).stdout
    spec = json.loads(out)["spec"]
    assert spec["failurePolicy"] == {
        "maxFailures": 3,
        "backoffSeconds": 10,
        "maxBackoffSeconds": 300,
        "maxPreemptions": 20,
    }
    assert spec["tuner"]["factor"] == 3 and spec["suspend"] is False
