"""The API server itself rejects invalid TuningJobs (schema + CEL in the CRD)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from tests.e2e.harness import dry_run_rejected, sample, script_sample

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]


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
        (
            {"tuner": {"callbacks": [{"class": "ReduceLROnPlateau"}]}},
            "spec.tuner.callbacks[0].class",
        ),
        ({"tuner": {"callbacks": [{"args": {}}]}}, "spec.tuner.callbacks[0].class: Required"),
        ({"distribution": {"gpusPerWorker": 99}}, "spec.distribution.gpusPerWorker"),
        (
            {"checkpoint": {"intervalSeconds": "fast"}},
            'spec.checkpoint.intervalSeconds must be an integer >= 0 (0 = off) or "auto"',
        ),
        ({"checkpoint": {"intervalSeconds": -1}}, "spec.checkpoint.intervalSeconds must be"),
        (
            {"distribution": {"gpusPerWorker": 2, "elastic": {"shapes": [{"gpusPerWorker": 4}]}}},
            "each shape uses at most the job's own GPUs",
        ),
        (
            {"distribution": {"elastic": {"shapes": [{"workers": 1}]}}},
            "spec.distribution.elastic.shapes[0].gpusPerWorker: Required",
        ),
        (
            {"distribution": {"elastic": {"shapes": [{"gpusPerWorker": 0}], "waitSeconds": 1}}},
            "spec.distribution.elastic.waitSeconds",
        ),
        (
            {"parallelTrials": 2, "distribution": {"elastic": {"shapes": [{"gpusPerWorker": 0}]}}},
            "spec.distribution.elastic: not with parallelTrials > 1",
        ),
        (
            {
                "distribution": {
                    "gpusPerWorker": 4,
                    "elastic": {
                        "shapes": [{"gpusPerWorker": 2}, {"workers": 1, "gpusPerWorker": 2}]
                    },
                }
            },
            "spec.distribution.elastic.shapes: Invalid value: each shape is listed once",
        ),
        (
            {"distribution": {"gpusPerWorker": 2, "elastic": {"shapes": [{"gpusPerWorker": 2}]}}},
            "the job's own shape (workers x gpusPerWorker) is not listed again",
        ),
        (
            {
                "distribution": {
                    "strategy": "Mirrored",
                    "gpusPerWorker": 4,
                    "elastic": {"shapes": [{"workers": 2, "gpusPerWorker": 1}]},
                }
            },
            "strategy Mirrored runs in one pod, so each shape's workers must be 1",
        ),
        (
            {
                "checkpoint": {"size": "1Gi", "accessModes": ["ReadWriteOncePod"]},
                "distribution": {
                    "gpusPerWorker": 4,
                    "elastic": {"shapes": [{"workers": 2, "gpusPerWorker": 1}]},
                },
            },
            "ReadWriteOncePod allows one pod only, so each shape's workers must be 1",
        ),
    ],
)
def test_invalid_specs_are_rejected_with_a_clear_message(kubectl, change, message):
    job = sample("bad", "default")
    job["spec"].update(change)
    assert message in dry_run_rejected(kubectl, job)


SCRIPT = {"configMap": {"name": "my-search"}}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"script": SCRIPT, "hypermodel": "m:H"}, "set exactly one of spec.hypermodel"),
        ({"script": None}, "set exactly one of spec.hypermodel"),
        ({"data": {"synthetic": {}}}, "spec.data is only allowed with spec.hypermodel"),
        ({"tuner": {"maxTrials": 3}}, "spec.tuner is only allowed with spec.hypermodel"),
        (
            {"script": {**SCRIPT, "path": "/checkpoints/s.py"}},
            "set exactly one of spec.script.configMap or spec.script.path",
        ),
        ({"script": {}}, "set exactly one of spec.script.configMap or spec.script.path"),
        ({"script": {"path": "code/search.py"}}, "spec.script.path"),
        ({"script": {"configMap": {"name": "My_Search"}}}, "spec.script.configMap.name"),
        ({"script": {"configMap": {"key": "search.py"}}}, "spec.script.configMap.name"),
        (
            {"script": {"configMap": {"name": "s", "key": "dir/search.py"}}},
            "spec.script.configMap.key",
        ),
        ({"script": {"configMap": {"name": "s", "key": ".."}}}, "not a valid ConfigMap key"),
        ({"script": {**SCRIPT, "args": ["x"] * 65}}, "spec.script.args"),
        ({"script": {**SCRIPT, "args": [3]}}, "spec.script.args[0]"),
        (
            {"script": {**SCRIPT, "continueOptimizerState": "yes"}},
            "spec.script.continueOptimizerState",
        ),
        (
            {"script": {"path": "/opt/s.py", "requirements": "requirements.txt"}},
            "spec.script.requirements: a key needs spec.script.configMap",
        ),
        ({"script": {**SCRIPT, "requirements": "dir/reqs.txt"}}, "spec.script.requirements"),
    ],
)
def test_invalid_script_specs_are_rejected_with_a_clear_message(kubectl, change, message):
    job = script_sample("bad-script", "default")
    for key, value in change.items():
        if value is None:
            del job["spec"][key]
        else:
            job["spec"][key] = value
    assert message in dry_run_rejected(kubectl, job)


def test_script_jobs_are_accepted_and_their_mode_is_immutable(kubectl):
    by_path = script_sample("by-path", "default")
    by_path["spec"]["script"] = {"path": "/checkpoints/code/search.py", "args": ["--epochs", "3"],
                                 "requirements": "/checkpoints/code/requirements.txt"}  # fmt: skip
    out = kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(by_path)
    ).stdout
    spec = json.loads(out)["spec"]
    assert "data" not in spec and "tuner" not in spec  # no object defaults any more
    assert spec["script"]["deterministic"] is False
    assert spec["script"]["continueOptimizerState"] is False  # keras-tuner's promotions
    # a spec-mode job without data and tuner is valid; no objective direction default
    minimal = sample("minimal", "default")
    del minimal["spec"]["data"]
    minimal["spec"]["tuner"] = {"objective": {"name": "val_loss"}}
    out = kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(minimal)
    ).stdout
    assert json.loads(out)["spec"]["tuner"]["objective"] == {"name": "val_loss"}
    job = script_sample("script-mode", "default")
    kubectl.apply(job)
    try:
        for change, message in [
            ({"script": {"configMap": {"name": "other"}}}, "spec.script is immutable"),
            ({"script": None, "hypermodel": "m:H"}, "cannot be added or removed after creation"),
        ]:
            changed = copy.deepcopy(job)
            for key, value in change.items():
                if value is None:
                    del changed["spec"][key]
                else:
                    changed["spec"][key] = value
            result = kubectl("apply", "-f", "-", input=yaml.safe_dump(changed), check=False)
            assert result.returncode != 0 and message in result.stderr, result.stderr
    finally:
        kubectl("delete", "tj", "script-mode", "-n", "default", "--wait=false")


def test_name_length_and_immutable_fields(kubectl):
    long_name = sample("x" * 46, "default")
    assert "at most 45 characters" in dry_run_rejected(kubectl, long_name)
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
        "maxTrialOOMs": 10,
    }
    assert spec["tuner"]["factor"] == 3 and spec["suspend"] is False


def test_checkpoint_interval_seconds_accepts_auto_and_integers(kubectl):
    for value in ("auto", 0, 300):
        job = sample("interval", "default")
        job["spec"]["checkpoint"] = {"intervalSeconds": value}
        out = kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(job)
        ).stdout
        assert json.loads(out)["spec"]["checkpoint"]["intervalSeconds"] == value
