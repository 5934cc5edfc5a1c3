"""Operator-side spec validation (what the schema cannot check) and the config."""

from __future__ import annotations

import pytest
from tuneop.config import Config, ConfigError
from tuneop.spec import FailurePolicy, JobSpec, validate

BASE = {"image": "img", "hypermodel": "m:H"}


def errors_of(**changes) -> list[str]:
    return [str(e) for e in validate(JobSpec.from_dict({**BASE, **changes}))]


def test_valid_minimal_spec():
    assert errors_of() == []


def test_errors_name_the_field():
    assert errors_of(env=[{"name": "A"}, {"name": "TUNEOP_JOB_NAME", "value": "x"}]) == [
        "spec.env[1].name: TUNEOP_JOB_NAME is reserved (set by the operator)"
    ]
    assert errors_of(env=[{"name": "TF_CONFIG"}])[0].startswith("spec.env[0].name")
    assert errors_of(resources={"requests": {"memory": "8Gi"}, "limits": {"memory": "4Gi"}}) == [
        "spec.resources.requests.memory: 8Gi exceeds spec.resources.limits.memory (4Gi)"
    ]
    assert errors_of(resources={"limits": {"nvidia.com/gpu": 1}}) == [
        "spec.resources.limits.nvidia.com/gpu: set spec.distribution.gpusPerWorker instead"
    ]
    assert errors_of(resources={"limits": {"cpu": "lots"}}) == [
        "spec.resources.limits.cpu: 'lots' is not a valid quantity"
    ]
    assert errors_of(checkpoint={"existingClaim": "c", "reclaimPolicy": "Delete"})[0].startswith(
        "spec.checkpoint.reclaimPolicy"
    )
    assert errors_of(distribution={"strategy": "Mirrored", "workers": 2})[0].startswith(
        "spec.distribution.strategy"
    )


def test_backoff_doubles_and_is_capped():
    policy = FailurePolicy(backoff_seconds=10, max_backoff_seconds=35)
    assert [policy.backoff(n) for n in range(5)] == [0, 10, 20, 35, 35]


def test_config_from_env_validates():
    config = Config.from_env(
        {"TUNEOP_OPERATOR_NAMESPACES": "a, b", "TUNEOP_OPERATOR_PRIORITY": "7"}
    )
    assert config.namespaces == ("a", "b") and config.priority == 7
    assert config.metrics_port == 8080 and config.health_port == 8081
    assert config.peering_name == "tuneop"
    assert Config.from_env({"TUNEOP_OPERATOR_PEERING": ""}).peering_name == ""
    with pytest.raises(ConfigError, match="TUNEOP_OPERATOR_METRICS_PORT"):
        Config.from_env({"TUNEOP_OPERATOR_METRICS_PORT": "http"})
    with pytest.raises(ConfigError, match="RECONCILE_SECONDS"):
        Config.from_env({"TUNEOP_OPERATOR_RECONCILE_SECONDS": "0"})
