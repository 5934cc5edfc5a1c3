"""The CRD file (manifests/crd/tuneop.io_tuningjobs.yaml) as an API contract: names,
printer columns, a description on every field, defaults in sync with the operator's
typed spec, and the sample valid against the schema. CEL rules need a real API server:
tests/e2e/test_operator_api.py checks those."""

from __future__ import annotations

import json
from typing import Any

import pytest
import tuneop_contract as contract
import yaml
from tuneop.api import names
from tuneop_contract.spec import (
    Checkpoint,
    DataSpec,
    Distribution,
    EarlyStoppingSpec,
    Elastic,
    FailurePolicy,
    JobSpec,
    Script,
    TunerSpec,
)

from tests.unit.crd_schema import CRD_FILE, ROOT, apply_defaults, check, crd, schema, walk

SAMPLE = ROOT / "manifests" / "samples" / "tuningjob-emg.yaml"
SCRIPT_SAMPLE = ROOT / "manifests" / "samples" / "tuningjob-script.yaml"


def test_names_scope_and_printer_columns():
    doc = crd()
    assert doc["metadata"]["name"] == f"{names.PLURAL}.{names.GROUP}"
    spec = doc["spec"]
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == names.KIND
    assert spec["names"]["shortNames"] == ["tj"]
    assert set(spec["names"]["categories"]) == {"all", "ml"}
    version = spec["versions"][0]
    assert version["name"] == names.VERSION and version["storage"] and version["served"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["State"] == ".status.phase"
    assert columns["Trials"] == ".status.trials"
    assert columns["Best"] == ".status.bestTrial.score"
    assert columns["Preemptions"] == ".status.preemptions"
    assert columns["Age"] == ".metadata.creationTimestamp"


def test_every_field_has_a_description():
    missing = [
        path
        for path, node in walk(schema())
        if path not in (".metadata",)
        and not str(node.get("description", "")).strip()
        and not path.endswith("{}")
    ]
    assert missing == []


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value).lower()


def test_kubectl_explain_shows_each_default_and_bound():
    """`kubectl explain` prints a field's description, not its schema's default or
    minimum/maximum: each description says them."""
    missing = []
    for path, node in walk(schema()["properties"]["spec"], ".spec"):
        description = " ".join(str(node.get("description", "")).split())
        default = node.get("default")
        scalar = default is not None and not isinstance(default, dict | list)
        if scalar and f"Default {_shown(default)}" not in description:
            missing.append(f"{path}: default {default}")
        for bound in ("minimum", "maximum"):
            if bound in node and str(node[bound]) not in description:
                missing.append(f"{path}: {bound} {node[bound]}")
    assert missing == []


def test_spec_covers_the_agreed_shape():
    spec_props = schema()["properties"]["spec"]["properties"]
    for field in [
        "image",
        "imagePullPolicy",
        "hypermodel",
        "pythonPath",
        "data",
        "tuner",
        "distribution",
        "resources",
        "nodeSelector",
        "tolerations",
        "affinity",
        "priorityClassName",
        "env",
        "checkpoint",
        "failurePolicy",
        "stallTimeoutSeconds",
        "suspend",
        "ttlSecondsAfterFinished",
        "terminationGracePeriodSeconds",
        "template",
    ]:
        assert field in spec_props, field
    tuner = spec_props["tuner"]["properties"]
    assert set(tuner) >= {
        "algorithm", "objective", "maxTrials", "maxEpochs", "factor", "hyperbandIterations",
        "executionsPerTrial", "seed", "batchSize", "deterministic",
    }  # fmt: skip
    rules = [r["rule"] for _, n in walk(schema()) for r in n.get("x-kubernetes-validations", [])]
    for immutable in ("tuner", "hypermodel", "distribution", "data"):
        node = spec_props[immutable]
        assert "self == oldSelf" in [r["rule"] for r in node["x-kubernetes-validations"]]
    assert any("synthetic" in r and "loader" in r for r in rules)
    assert any("workers" in r for r in rules)
    assert any("existingClaim" in r for r in rules)


def test_crd_defaults_match_the_operator_spec_defaults():
    props = schema()["properties"]["spec"]["properties"]

    def defaults(section: str) -> dict[str, Any]:
        return {k: v["default"] for k, v in props[section]["properties"].items() if "default" in v}

    assert defaults("distribution") == {
        "strategy": Distribution.strategy,
        "workers": Distribution.workers,
        "shmSize": Distribution.shm_size,
        "gpusPerWorker": Distribution.gpus_per_worker,
        "gpuResource": Distribution.gpu_resource,
    }
    elastic = props["distribution"]["properties"]["elastic"]
    assert defaults_of(elastic) == {"waitSeconds": Elastic.wait_seconds}
    assert defaults("failurePolicy") == {
        "maxFailures": FailurePolicy.max_failures,
        "backoffSeconds": FailurePolicy.backoff_seconds,
        "maxBackoffSeconds": FailurePolicy.max_backoff_seconds,
        "maxPreemptions": FailurePolicy.max_preemptions,
        "maxTrialOOMs": FailurePolicy.max_trial_ooms,
    }
    assert defaults("checkpoint") == {
        "reclaimPolicy": Checkpoint.reclaim_policy,
        "intervalSteps": Checkpoint.interval_steps,
        "intervalSeconds": Checkpoint.interval_seconds,
        "keep": Checkpoint.keep,
        "adopt": Checkpoint.adopt,
    }
    minimal = {"image": "x", "hypermodel": "m:H"}
    defaulted = apply_defaults(minimal, schema()["properties"]["spec"])
    from_crd, from_code = JobSpec.from_dict(defaulted), JobSpec.from_dict(minimal)
    assert dataclasses_equal(from_crd, from_code)
    # no object-level defaults for data and tuner: they are only allowed with hypermodel
    # (the trainer's code defaults cover a spec-mode job without them)
    assert "data" not in defaulted and "tuner" not in defaulted
    with_tuner = apply_defaults({**minimal, "tuner": {}, "data": {"synthetic": {}}}, spec_node())
    assert with_tuner["data"] == {"synthetic": {"samples": 256, "seed": 0}, "validationSplit": 0.2}
    # no direction default: the trainer infers it from the metric name (val_loss: min)
    assert with_tuner["tuner"]["objective"] == {"name": "val_accuracy"}
    script = {"image": "x", "script": {"configMap": {"name": "s"}}}
    defaulted = apply_defaults(script, spec_node())
    assert defaulted["script"] == {
        "configMap": {"name": "s"},
        "deterministic": False,
        "continueOptimizerState": False,
    }
    assert dataclasses_equal(JobSpec.from_dict(defaulted), JobSpec.from_dict(script))


def defaults_of(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v["default"] for k, v in node["properties"].items() if "default" in v}


def test_crd_defaults_match_the_trainers_fields_defaults():
    """The search's fields, which the trainer reads with the same parser (the contract's
    tuneop_contract.spec): the CRD's defaults are the parser's, and a spec-mode job
    with each section given empty parses the same with or without them."""
    node = spec_node()
    top = defaults_of(node)
    assert {k: top[k] for k in ("stallTimeoutSeconds", "parallelTrials", "pythonPath")} == {
        "stallTimeoutSeconds": JobSpec.stall_timeout_seconds,
        "parallelTrials": JobSpec.parallel_trials,
        "pythonPath": list(JobSpec().python_path),
    }
    tuner = node["properties"]["tuner"]
    assert defaults_of(tuner) == {
        "algorithm": TunerSpec.algorithm,
        "objective": {},
        "maxTrials": TunerSpec.max_trials,
        "maxEpochs": TunerSpec.max_epochs,
        "factor": TunerSpec.factor,
        "hyperbandIterations": TunerSpec.hyperband_iterations,
        "executionsPerTrial": TunerSpec.executions_per_trial,
        "seed": TunerSpec.seed,
        "batchSize": TunerSpec.batch_size,
        "deterministic": TunerSpec.deterministic,
        "tensorboard": TunerSpec.tensorboard,
    }
    assert defaults_of(tuner["properties"]["objective"]) == {"name": TunerSpec.objective}
    early = defaults_of(tuner["properties"]["earlyStopping"])
    assert early == {
        "monitor": EarlyStoppingSpec.monitor,
        "patience": EarlyStoppingSpec.patience,
        "minDelta": EarlyStoppingSpec.min_delta,
        "mode": "auto",  # resolved from the monitor: val_loss is minimised
    }
    data = node["properties"]["data"]
    assert defaults_of(data) == {"validationSplit": DataSpec.validation_split}
    assert defaults_of(data["properties"]["synthetic"]) == {
        "samples": DataSpec.synthetic_samples,
        "seed": DataSpec.synthetic_seed,
    }
    script = node["properties"]["script"]
    assert defaults_of(script) == {
        "deterministic": Script.deterministic,
        "continueOptimizerState": Script.continue_optimizer_state,
    }
    given = {
        "image": "x",
        "hypermodel": "m:H",
        "tuner": {"earlyStopping": {}},
        "data": {"synthetic": {}},
    }
    from_crd = JobSpec.from_dict(apply_defaults(given, node))
    assert dataclasses_equal(from_crd, JobSpec.from_dict(given)) and from_crd.errors == ()


def spec_node() -> dict[str, Any]:
    return dict(schema()["properties"]["spec"])


def spec_rules() -> dict[str, str]:
    return {r["rule"]: r["message"] for r in spec_node()["x-kubernetes-validations"]}


def test_script_mode_shape_and_rules():
    """The API of script mode; the CEL rules themselves run on the real API server in
    tests/e2e/test_operator_api.py."""
    node = spec_node()
    assert "required" not in node  # spec.image may come from the operator's default
    script = node["properties"]["script"]
    assert set(script["properties"]) == {
        "configMap",
        "path",
        "args",
        "deterministic",
        "continueOptimizerState",
        "requirements",
    }
    assert set(script["properties"]["configMap"]["properties"]) == {"name", "key"}
    assert script["properties"]["configMap"]["required"] == ["name"]
    assert script["properties"]["args"]["maxItems"] == 64
    assert script["properties"]["args"]["items"]["type"] == "string"
    assert [r["rule"] for r in script["x-kubernetes-validations"]] == [
        "has(self.configMap) != has(self.path)",
        "self == oldSelf",
        "!has(self.requirements) || self.requirements.startsWith('/') || has(self.configMap)",
    ]
    rules = spec_rules()
    assert "has(self.hypermodel) != has(self.script)" in rules
    assert "!has(self.data) || has(self.hypermodel)" in rules
    assert "!has(self.tuner) || has(self.hypermodel)" in rules
    for message in rules.values():
        assert "spec." in message, message  # every message names the field
    # what `kubectl explain` says agrees with the contract the trainer resolves by
    described = str(script["properties"]["configMap"]["description"])
    assert contract.SCRIPT_DIR in described
    key = script["properties"]["configMap"]["properties"]["key"]
    assert contract.DEFAULT_SCRIPT_KEY in str(key["description"])
    assert contract.DEFAULT_CHECKPOINT_DIR in str(script["properties"]["path"]["description"])


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        (("configMap", "name"), "emg-search", True),
        (("configMap", "name"), "my.search-2", True),
        (("configMap", "name"), "My_Search", False),
        (("configMap", "key"), "search.py", True),
        (("configMap", "key"), "a b.py", False),
        (("configMap", "key"), "dir/search.py", False),
        (("path",), "/checkpoints/code/search.py", True),
        (("path",), "code/search.py", False),
    ],
)
def test_script_field_patterns(field, value, ok):
    node = spec_node()["properties"]["script"]
    for key in field:
        node = node["properties"][key]
    assert (check(value, node) == []) is ok


def dataclasses_equal(a: JobSpec, b: JobSpec) -> bool:
    fields = [f for f in JobSpec.__dataclass_fields__ if f != "raw"]
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def test_sample_is_valid_and_small():
    sample = yaml.safe_load(SAMPLE.read_text())
    assert sample["apiVersion"] == names.API_VERSION and sample["kind"] == names.KIND
    assert check(sample, schema()) == []
    tuner = sample["spec"]["tuner"]
    assert tuner["algorithm"] == "Hyperband" and tuner["maxEpochs"] <= 3
    assert sample["spec"]["data"]["synthetic"]["samples"] <= 1024


def test_script_sample_is_valid_and_names_its_script():
    sample = yaml.safe_load(SCRIPT_SAMPLE.read_text())
    assert sample["apiVersion"] == names.API_VERSION and sample["kind"] == names.KIND
    assert check(sample, schema()) == []
    spec = sample["spec"]
    assert "hypermodel" not in spec and "data" not in spec and "tuner" not in spec
    assert spec["script"]["configMap"]["name"] == "emg-search"
    # the header's `kubectl create configmap --from-file=...` creates the key it runs
    script_file = SCRIPT_SAMPLE.parent / "emg_search.py"
    header = SCRIPT_SAMPLE.read_text()
    assert "kubectl create configmap emg-search --from-file=manifests/samples/emg_search.py" in (
        header
    )
    assert spec["script"]["configMap"].get("key", script_file.name) == script_file.name


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("tuner", "algorithm"), "Genetic", "not in"),
        (("tuner", "objective", "direction"), "up", "not in"),
        (("tuner", "maxEpochs"), 0, "< 1"),
        (("data", "validationSplit"), 1.0, "above"),
        (("hypermodel",), "no-colon-here", "does not match"),
        (("distribution", "gpusPerWorker"), -1, "< 0"),
        (("resources", "limits", "memory"), "4 gigs", "does not match"),
        (("checkpoint", "reclaimPolicy"), "Recycle", "not in"),
        (("tuner", "maxTrail"), 3, "unknown field"),
    ],
)
def test_schema_rejects_bad_values(path, value, expected):
    sample = yaml.safe_load(SAMPLE.read_text())
    node = sample["spec"]
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    errors = check(sample, schema())
    assert any(expected in e for e in errors), errors


def test_peering_crds_are_cluster_and_namespaced():
    docs = list(yaml.safe_load_all((CRD_FILE.parent / "kopf-peering.yaml").read_text()))
    assert {d["metadata"]["name"] for d in docs} == {
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    }


def _progress_schema() -> dict[str, Any]:
    return schema()["properties"]["status"]["properties"]["progress"]


def test_status_progress_declares_every_contract_field_with_its_type():
    props = _progress_schema()["properties"]
    assert set(props) == set(contract.Progress().to_status())
    full = contract.Progress(
        phase=contract.PHASE_RUNNING, trial_id="0003", trials_completed=3, trials_total=10,
        resumed_from_step=4, resumed_from_epoch=1, last_progress_time="2026-01-01T00:00:00Z",
        last_checkpoint_time="2026-01-01T00:00:00Z", best_trial_id="0001", best_score=0.5,
        best_hyperparameters={"units": 8}, objective="val_loss", direction="min",
        top_trials=[{"trialId": "0001", "score": 0.5, "hyperparameters": {"units": 8}}],
    ).to_status()  # fmt: skip
    assert check(full, _progress_schema(), ".status.progress") == []
    assert check(contract.Progress().to_status(), _progress_schema()) == []
    for field in contract.PHASES:
        assert field in props["phase"]["enum"]


@pytest.mark.parametrize(
    "bad",
    [{"trialsCompleted": "3"}, {"trialsTotal": -1}, {"step": 1.5}, {"bestScore": "high"},
     {"phase": "Exploded"}, {"direction": "up"}, {"bestHyperparameters": [1]},
     {"topTrials": [{"trialId": "1"}]},
     {"topTrials": [{"trialId": str(i), "score": 1.0} for i in range(contract.TOP_TRIALS + 1)]}],
)  # fmt: skip
def test_status_progress_rejects_bad_values_and_keeps_a_newer_trainers_fields(bad):
    assert check(bad, _progress_schema(), ".status.progress") != []
    assert check({"fromANewerTrainer": 1}, _progress_schema()) == []


def test_both_top_trial_lists_hold_at_most_the_contracts_number():
    status = schema()["properties"]["status"]["properties"]
    assert status["topTrials"]["maxItems"] == contract.TOP_TRIALS
    assert _progress_schema()["properties"]["topTrials"]["maxItems"] == contract.TOP_TRIALS
    entry = {"id": "0001", "score": 0.5, "hyperparameters": {"units": 8}}
    assert check([entry], status["topTrials"], ".status.topTrials") == []
    assert check([{"id": "0001"}], status["topTrials"], ".status.topTrials") != []


def test_checkpoint_interval_seconds_is_an_integer_or_auto():
    node = spec_node()["properties"]["checkpoint"]["properties"]["intervalSeconds"]
    assert node["x-kubernetes-int-or-string"] is True and "type" not in node
    (rule,) = node["x-kubernetes-validations"]
    assert contract.CHECKPOINT_INTERVAL_AUTO in rule["rule"] and "self >= 0" in rule["rule"]
    assert rule["message"].startswith("spec.checkpoint.intervalSeconds")
    assert f'"{contract.CHECKPOINT_INTERVAL_AUTO}"' in rule["message"]
    # what `kubectl explain` says of the caps is what the trainer applies
    from tuneop_trainer.checkpoint import cadence

    described = node["description"]
    assert f"{cadence.OVERHEAD_BUDGET:.0%}".replace("%", " %") in described
    assert f"{cadence.MIN_INTERVAL_SECONDS:.0f} s" in described
    assert f"{cadence.MAX_INTERVAL_SECONDS / 3600:.0f} h" in described
    sample = yaml.safe_load(SAMPLE.read_text())
    sample["spec"]["checkpoint"]["intervalSeconds"] = contract.CHECKPOINT_INTERVAL_AUTO
    assert check(sample, schema()) == []


def _status_keys(prefix: str = "", exclude: tuple[str, ...] = ()) -> set[str]:
    """The values of operator/tuneop/api/status.py's key constants named `prefix*`."""
    from tuneop.api import status as st

    return {
        value
        for name, value in vars(st).items()
        if name.isupper() and name.startswith(prefix) and isinstance(value, str)
        if not name.startswith(exclude)
    }


def test_status_schema_declares_every_key_the_operator_writes():
    status = schema()["properties"]["status"]["properties"]
    top = _status_keys(exclude=("PHASE", "COND_", "GROUP_", "GOODPUT_", "REFUSED_"))
    assert top - set(status) == set()
    group_entry = status["groups"]["items"]["properties"]
    per_group = _status_keys("GROUP_") | {
        "attempt", "startTime", "nextRetryTime", "podsRefused", "restoredAttempt",
        "restoreBaseline", "lastProgressTime", "lastCheckpointTime", "preemptions",
        "failures", "restarts", "restores", "queueEvictions", "message",
    }  # fmt: skip
    assert per_group - set(group_entry) == set()
    assert _status_keys("GOODPUT_") - set(status["goodput"]["properties"]) == set()
    refused = status["podsRefused"]["properties"]
    assert _status_keys("REFUSED_") - set(refused) == set()
    from tuneop.api import status as st

    described = status["conditions"]["description"]
    assert [t for t in st.CONDITION_TYPES if t not in described] == []
    assert [p for p in st.PHASES if p not in status["phase"]["description"]] == []


def test_the_status_patch_takes_only_keys_the_schema_declares():
    """Every key the operator can write: the status patch (decide.patch.StatusPatch)
    and a group's entry (decide.slot) refuse any key outside st.KEYS and
    st.GROUP_KEYS, which hold every key constant and which the schema declares."""
    import datetime as dt

    from tuneop.api import status as st
    from tuneop.decide.patch import StatusPatch

    status = schema()["properties"]["status"]["properties"]
    every = _status_keys(exclude=("PHASE", "COND_", "GROUP_", "GOODPUT_", "REFUSED_"))
    assert every | {st.PHASE} == st.KEYS
    assert st.KEYS - set(status) == set()
    assert st.GROUP_KEYS - set(status["groups"]["items"]["properties"]) == set()
    patch = StatusPatch({}, 1, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), {})
    with pytest.raises(KeyError, match="not declared"):
        patch.put("undeclared", 1)
    patch.put(st.PHASE, st.PHASE_PENDING)
    assert patch.body == {st.PHASE: st.PHASE_PENDING}
