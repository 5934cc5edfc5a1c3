"""Operator-side spec validation (what the schema cannot check) and the config."""

from __future__ import annotations

import pytest
import tuneop_contract as contract
from tuneop.api.spec import check_script_configmap, validate
from tuneop.run.config import Config, ConfigError
from tuneop_contract.spec import FailurePolicy, JobSpec, Script

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


def test_the_search_fields_are_checked_by_the_trainers_parser_too():
    """One parser (tuneop_contract.spec): the operator refuses what the trainer would, in
    the trainer's words, before any pod; what only keras-tuner can tell it leaves to
    the trainer."""
    assert errors_of(tuner={"maxEpochs": 0}, data={"validationSplit": 1.5}) == [
        "spec.data.validationSplit: 1.5 must be a number in [0, 1)",
        "spec.tuner.maxEpochs: 0 must be >= 1",
    ]
    assert errors_of(tuner={"objective": {"name": "auc"}}) == []
    assert errors_of(tuner={"earlyStopping": {"monitor": "my_score"}}) == []
    spec = JobSpec.from_dict({**BASE, "tuner": {"objective": "val_loss"}})
    assert (spec.tuner.objective, spec.tuner.direction) == ("val_loss", "min")


def test_checkpoint_interval_seconds_is_an_integer_or_auto():
    for good, seconds, auto in ((0, 0, False), (30, 30, False), ("auto", 60, True)):
        assert errors_of(checkpoint={"intervalSeconds": good}) == []
        parsed = JobSpec.from_dict({**BASE, "checkpoint": {"intervalSeconds": good}})
        assert (parsed.checkpoint.interval_seconds, parsed.checkpoint.auto_interval) == (
            seconds,
            auto,
        )
    # an object the API server did not check: named, never an exception
    for bad in ("fast", "Auto", -5, 1.5, True):
        errors = errors_of(checkpoint={"intervalSeconds": bad})
        assert len(errors) == 1, bad
        assert errors[0].startswith("spec.checkpoint.intervalSeconds: ")
        assert '"auto"' in errors[0]


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
    assert (config.request_timeout_seconds, config.error_backoff_max_seconds) == (30.0, 60.0)
    bounded = Config.from_env(
        {
            "TUNEOP_OPERATOR_REQUEST_TIMEOUT_SECONDS": "5",
            "TUNEOP_OPERATOR_ERROR_BACKOFF_MAX_SECONDS": "120",
        }
    )
    assert (bounded.request_timeout_seconds, bounded.error_backoff_max_seconds) == (5.0, 120.0)
    with pytest.raises(ConfigError, match="REQUEST_TIMEOUT_SECONDS"):
        Config.from_env({"TUNEOP_OPERATOR_REQUEST_TIMEOUT_SECONDS": "0"})
    assert config.peering_lifetime_seconds == 60
    lifetime = Config.from_env({"TUNEOP_OPERATOR_PEERING_LIFETIME_SECONDS": "6"})
    assert lifetime.peering_lifetime_seconds == 6
    with pytest.raises(ConfigError, match="PEERING_LIFETIME_SECONDS"):
        Config.from_env({"TUNEOP_OPERATOR_PEERING_LIFETIME_SECONDS": "1"})


SCRIPT = {"image": "img", "script": {"configMap": {"name": "s"}}}


def test_script_mode_is_parsed():
    assert JobSpec.from_dict(BASE).script is None
    assert JobSpec.from_dict(BASE).script_configmap == ""
    spec = JobSpec.from_dict(
        {
            "image": "img",
            "script": {
                "configMap": {"name": "s", "key": "k.py"},
                "args": ["--epochs", "3"],
                "deterministic": True,
            },
        }
    )
    assert spec.script == Script(config_map="s", key="k.py", args=("--epochs", "3"),
                                 deterministic=True)  # fmt: skip
    assert spec.script_configmap == "s"
    by_path = JobSpec.from_dict({"image": "img", "script": {"path": "/checkpoints/s.py"}})
    assert by_path.script == Script(path="/checkpoints/s.py") and by_path.script_configmap == ""
    assert validate(spec) == [] and validate(by_path) == []
    # the trainer's rule (and the CRD's): arguments are strings, none converted
    numbers = JobSpec.from_dict({**SCRIPT, "script": {"path": "/s.py", "args": ["--epochs", 3]}})
    assert [str(e) for e in validate(numbers)] == ["spec.script.args: must be a list of strings"]


def test_a_script_path_where_the_configmap_is_mounted_is_refused():
    spec = JobSpec.from_dict({"image": "img", "script": {"path": contract.SCRIPT_DIR + "/s.py"}})
    (error,) = validate(spec)
    assert error.field == "spec.script.path" and "spec.script.configMap" in error.message
    near = JobSpec.from_dict({"image": "img", "script": {"path": contract.SCRIPT_DIR + "-x/s"}})
    assert validate(near) == []


@pytest.mark.parametrize(
    ("key", "configmap", "expected"),
    [
        ("", {"data": {"mine.py": ""}}, None),
        ("", {"binaryData": {"mine.py": ""}}, None),
        ("", {"data": {"a.py": "", contract.DEFAULT_SCRIPT_KEY: ""}}, None),
        ("b.py", {"data": {"a.py": ""}, "binaryData": {"b.py": ""}}, None),
        (
            "train.py",
            {"data": {"a.py": "", "b.py": ""}},
            "spec.script.configMap.key: ConfigMap 's' has no key 'train.py' (it has: a.py, b.py)",
        ),
        (
            "",
            {"data": {"a.py": "", "b.py": ""}},
            "spec.script.configMap.key: unset, and ConfigMap 's' has 2 keys (a.py, b.py) but no "
            f"{contract.DEFAULT_SCRIPT_KEY!r}: set spec.script.configMap.key to the entry script",
        ),
        ("", {}, "spec.script.configMap: ConfigMap 's' is empty (no script)"),
    ],
)
def test_the_script_configmap_must_hold_the_entry_script(key, configmap, expected):
    script = {"configMap": {"name": "s", **({"key": key} if key else {})}}
    error = check_script_configmap(JobSpec.from_dict({**SCRIPT, "script": script}), configmap)
    assert (str(error) if error else None) == expected


@pytest.mark.parametrize(
    ("requirements", "configmap", "expected"),
    [
        ("requirements.txt", {"data": {"mine.py": "", "requirements.txt": ""}}, None),
        ("/image/reqs.txt", {"data": {"mine.py": ""}}, None),
        (
            "reqs.txt",
            {"data": {"mine.py": ""}},
            "spec.script.requirements: ConfigMap 's' has no key 'reqs.txt' (it has: mine.py)",
        ),
        (
            "r.txt",
            {"data": {"r.txt": ""}},
            "spec.script.configMap: ConfigMap 's' is empty (no script)",
        ),
    ],
)
def test_the_requirements_key_is_in_the_configmap_and_not_the_entry_script(
    requirements, configmap, expected
):
    script = {"configMap": {"name": "s"}, "requirements": requirements}
    error = check_script_configmap(JobSpec.from_dict({**SCRIPT, "script": script}), configmap)
    assert (str(error) if error else None) == expected


def test_the_configmap_check_ignores_other_modes():
    assert check_script_configmap(JobSpec.from_dict(BASE), {}) is None
    by_path = JobSpec.from_dict({"image": "img", "script": {"path": "/s.py"}})
    assert check_script_configmap(by_path, {}) is None
