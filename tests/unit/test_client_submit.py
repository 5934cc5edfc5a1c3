"""What `tuneop run` submits, without a cluster: the job's name, the ConfigMap of the
script and its modules, and a TuningJob the CRD's schema accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import tuneop_contract as contract
from tuneop_client.submit import (
    CONFIGMAP_LIMIT,
    RunRequest,
    SubmitError,
    configmap,
    job_name,
    script_files,
    tuning_job,
)

from tests.unit.crd_schema import check, schema


def _script(tmp_path: Path) -> Path:
    (tmp_path / "model_lib.py").write_text("def build(hp): ...\n")
    (tmp_path / "notes.txt").write_text("not Python")
    script = tmp_path / "My_Search.py"
    script.write_text("import model_lib\n")
    return script


def test_the_script_and_the_modules_beside_it_go_in_one_configmap(tmp_path: Path) -> None:
    script = _script(tmp_path)
    name = job_name(RunRequest(script=script))
    assert name == "my-search"
    cm = configmap(name, "ml", script_files(script))
    assert cm["metadata"]["name"] == "my-search-script"
    assert sorted(cm["data"]) == ["My_Search.py", "model_lib.py"]
    (tmp_path / "big.py").write_text("#" * (CONFIGMAP_LIMIT + 1))
    with pytest.raises(SubmitError, match="more than a ConfigMap holds"):
        script_files(script)
    with pytest.raises(SubmitError, match=r"SCRIPT: .* is not a Python file"):
        script_files(tmp_path / "notes.txt")
    with pytest.raises(SubmitError, match="--name: 'x_y'"):
        job_name(RunRequest(script=script, name="x_y"))


def test_the_job_is_what_the_crd_accepts_with_every_option(tmp_path: Path) -> None:
    script = _script(tmp_path)
    request = RunRequest(
        script=script, args=("--epochs", "3"), gpus=2, workers=2, image="r/trainer:1",
        data="emg-data:/datasets", queue="team-a", elastic=True,
        requirements=tmp_path / "notes.txt", env=("PIP_INDEX_URL=https://m.example/simple",),
    )  # fmt: skip
    job = tuning_job(request, "my-search", "ml")
    assert check(job["spec"], schema()["properties"]["spec"], ".spec") == []
    spec = job["spec"]
    assert spec["script"]["configMap"] == {"name": "my-search-script", "key": "My_Search.py"}
    assert spec["script"]["args"] == ["--epochs", "3"]
    assert spec["script"]["requirements"] == "notes.txt"
    assert spec["env"] == [{"name": "PIP_INDEX_URL", "value": "https://m.example/simple"}]
    assert spec["distribution"]["elastic"]["shapes"] == [
        {"workers": 1, "gpusPerWorker": 2}, {"workers": 1, "gpusPerWorker": 1},
    ]  # fmt: skip
    (trainer,) = spec["template"]["spec"]["containers"]
    assert trainer["name"] == contract.TRAINER_CONTAINER
    assert trainer["volumeMounts"] == [{"name": "data", "mountPath": "/datasets", "readOnly": True}]
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
    parallel = tuning_job(RunRequest(script=script, parallel=2), "my-search", "ml")
    assert check(parallel["spec"], schema()["properties"]["spec"], ".spec") == []
    assert parallel["spec"]["parallelTrials"] == 2
    plain = tuning_job(RunRequest(script=script), "my-search", "ml")
    assert "image" not in plain["spec"] and "template" not in plain["spec"]
    with pytest.raises(SubmitError, match="--data"):
        tuning_job(RunRequest(script=script, data="claim:relative"), "x", "ml")
    with pytest.raises(SubmitError, match="--env: 'PIP' is not NAME=VALUE"):
        tuning_job(RunRequest(script=script, env=("PIP",)), "x", "ml")


def test_a_job_the_operator_would_refuse_is_refused_before_anything_is_created(
    tmp_path: Path,
) -> None:
    """The spec is checked with the parser the operator and the trainer use: one line
    naming the field, before the ConfigMap or the job exists."""
    script = _script(tmp_path)
    reserved = RunRequest(script=script, env=(f"{contract.ENV_TF_CONFIG}={{}}",))
    with pytest.raises(SubmitError, match=r"^the job would be refused: spec\.env\[0\]\.name"):
        tuning_job(reserved, "x", "ml")
    both = RunRequest(script=script, gpus=2, elastic=True, parallel=2)
    with pytest.raises(SubmitError, match=r"spec\.distribution\.elastic: not with parallelTrials"):
        tuning_job(both, "x", "ml")


def test_the_requirements_file_goes_in_the_configmap_beside_the_script(tmp_path: Path) -> None:
    script = _script(tmp_path)
    files = script_files(script, tmp_path / "notes.txt")
    assert sorted(files) == ["My_Search.py", "model_lib.py", "notes.txt"]
    with pytest.raises(SubmitError, match=r"--requirements: .* is not a requirements file"):
        script_files(script, tmp_path / "missing.txt")
