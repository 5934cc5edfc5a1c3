"""Bad specs give one-line errors naming the field, and exit 2 (EXIT_INVALID_SPEC)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import REPO, SCRIPTS, env, tiny_spec, write_spec
from tuneop_contract import EXIT_INVALID_SPEC, SCRIPT_DIR
from tuneop_contract.spec import SpecError
from tuneop_trainer.spec import load_spec_file, parse

from tests.forkserver import launch


def run_cli(tmp: Path, manifest: dict[str, Any]) -> tuple[int, str]:
    """`python -m tuneop_trainer run` on the manifest: its exit code and its output."""
    spec = write_spec(tmp, manifest)
    cmd = ["-m", "tuneop_trainer", "run", "--spec", str(spec), "--dir", str(tmp / "ckpt")]
    log = tmp / "log"
    code = launch(cmd, env(), log).wait(timeout=300)
    return code, log.read_text()


def error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, output[-3000:]
    return lines[0]


def test_unknown_algorithm(tmp_path: Path) -> None:
    code, output = run_cli(tmp_path, tiny_spec(algorithm="Foo"))
    assert code == EXIT_INVALID_SPEC
    assert error_line(output) == (
        'error: spec.tuner.algorithm: "Foo" is not one of Hyperband, RandomSearch, '
        "BayesianOptimization, GridSearch"
    )


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        (
            {"tuner": {"objective": {"name": "val_accuracy", "direction": "up"}}},
            'spec.tuner.objective.direction: "up" is not one of max, min',
        ),
        ({"tuner": {"maxEpochs": 0}}, "spec.tuner.maxEpochs: 0 must be >= 1"),
        ({"tuner": {"batchSize": "big"}}, 'spec.tuner.batchSize: "big" must be an integer >= 1'),
        (
            {"hypermodel": "no_colon"},
            'spec.hypermodel: "no_colon" is not of the form "pkg.module:Name"',
        ),
        (
            {"data": {"path": "/x.npz", "loader": "a:b"}},
            "spec.data: set exactly one of synthetic, path, loader (got ['path', 'loader'])",
        ),
        (
            {"data": {"validationSplit": 1.5}},
            "spec.data.validationSplit: 1.5 must be a number in [0, 1)",
        ),
        (
            {"distribution": {"strategy": "Parameter"}},
            'spec.distribution.strategy: "Parameter" is not one of Auto, Mirrored, '
            "MultiWorkerMirrored",
        ),
    ],
)
def test_parse_errors_name_the_field(patch: dict[str, Any], expected: str) -> None:
    spec: dict[str, Any] = {}
    for key, value in patch.items():
        spec[key] = value
    with pytest.raises(SpecError) as info:
        parse(spec)
    assert str(info.value) == expected


def test_manifest_and_bare_spec_parse_alike() -> None:
    manifest = tiny_spec()
    assert parse(manifest).job.tuner == parse(manifest["spec"]).job.tuner
    assert parse(manifest).job_name == "tiny"
    with pytest.raises(SpecError, match=r'^kind: "Pod" is not TuningJob$'):
        parse({**manifest, "kind": "Pod"})


@pytest.mark.slow
@pytest.mark.devices(2)  # the scope guard's case needs a MirroredStrategy
def test_runtime_spec_errors(tmp_path: Path) -> None:
    """Errors found only once TF runs: import, data, objective, scope guard."""
    cases = [
        (
            {"hypermodel": "nosuch.module:Model"},
            'error: spec.hypermodel: cannot import "nosuch.module"',
        ),
        (
            {"data": {"path": str(tmp_path / "missing.npz")}},
            f'error: spec.data.path: "{tmp_path / "missing.npz"}" does not exist',
        ),
        (
            {"hypermodel": "user_models:build_without_accuracy", "pythonPath": [str(SCRIPTS)]},
            'error: spec.tuner.objective.name: "val_accuracy" is not produced by the model; '
            "it reports loss, val_loss",
        ),
        (
            {"hypermodel": "user_models:build_uncompiled", "pythonPath": [str(SCRIPTS)]},
            "error: spec.hypermodel: build(hp) returned a model that is not compiled",
        ),
        (
            {"hypermodel": "user_models:BuiltOutsideScope", "pythonPath": [str(SCRIPTS)]},
            "error: spec.hypermodel: build(hp) returned a model or optimizer created outside the "
            "trainer's strategy scope",
        ),
    ]
    for i, (patch, expected) in enumerate(cases):
        manifest = tiny_spec(algorithm="RandomSearch", maxTrials=1, maxEpochs=1)
        manifest["spec"].update(patch)
        tmp = tmp_path / str(i)
        tmp.mkdir()
        code, output = run_cli(tmp, manifest)
        assert code == EXIT_INVALID_SPEC, output[-3000:]
        assert error_line(output).startswith(expected), output[-3000:]


def test_sample_manifests_parse() -> None:
    """What users apply (manifests/samples) is what the trainer accepts."""
    samples = sorted((REPO / "manifests" / "samples").glob("*.yaml"))
    assert samples
    modes = set()
    for path in samples:
        spec = load_spec_file(path)
        if spec.script is not None:
            modes.add("script")
            assert spec.script.path.endswith(".py")
        else:
            modes.add("hypermodel")
            assert spec.job.hypermodel and spec.job.tuner.algorithm
    assert modes == {"script", "hypermodel"}


@pytest.mark.parametrize(
    ("objective", "direction"),
    [
        ({"name": "val_loss"}, "min"),
        ("val_loss", "min"),
        ({"name": "val_accuracy"}, "max"),
        ({"name": "val_mean_absolute_error"}, "min"),
        ({"name": "auc"}, "max"),
        ({"name": "val_loss", "direction": "max"}, "max"),
    ],
)
def test_objective_direction_is_inferred_as_keras_tuner_does(
    objective: Any, direction: str
) -> None:
    assert parse({"tuner": {"objective": objective}}).job.tuner.direction == direction


def test_unknown_metric_without_direction_is_an_error() -> None:
    with pytest.raises(
        SpecError, match=r'^spec.tuner.objective.direction: cannot tell .*"my_score"'
    ):
        parse({"tuner": {"objective": {"name": "my_score"}}})


def test_script_spec() -> None:
    spec = parse(
        {"script": {"path": "/checkpoints/s.py", "args": ["--epochs", "2"], "deterministic": True}}
    )
    assert spec.script is not None
    assert (spec.script.path, spec.script.args, spec.script.deterministic) == (
        "/checkpoints/s.py",
        ("--epochs", "2"),
        True,
    )
    assert not spec.script.continue_optimizer  # keras-tuner's own promotions by default
    cm = parse(
        {"script": {"configMap": {"name": "m", "key": "train.py"}, "continueOptimizerState": True}}
    ).script
    assert cm is not None and cm.path.endswith("/train.py") and cm.continue_optimizer
    assert cm.requirements == ""
    with_reqs = parse(
        {"script": {"configMap": {"name": "m", "key": "t.py"}, "requirements": "req.txt"}}
    ).script
    assert with_reqs is not None and with_reqs.requirements == f"{SCRIPT_DIR}/req.txt"
    in_image = parse({"script": {"path": "/a.py", "requirements": "/opt/r.txt"}}).script
    assert in_image is not None and in_image.requirements == "/opt/r.txt"
    for bad, message in [
        ({"script": {"path": "s.py"}}, "spec.script.path"),
        ({"script": {"path": "/a.py"}, "hypermodel": "a:B"}, "spec.hypermodel"),
        ({"script": {}}, "spec.script: set exactly one"),
        ({"script": {"path": "/a.py", "args": [1]}}, "spec.script.args"),
        (
            {"script": {"path": "/a.py", "continueOptimizerState": "yes"}},
            'spec.script.continueOptimizerState: "yes" must be true or false',
        ),
        (
            {"script": {"path": "/a.py", "requirements": "r.txt"}},
            'spec.script.requirements: "r.txt" must be an absolute path with spec.script.path',
        ),
    ]:
        with pytest.raises(SpecError, match=f"^{message}"):
            parse(bad)


def test_crd_minimums_are_accepted() -> None:
    """The CRD's lowest allowed values must not be rejected by the trainer."""
    spec = parse({"checkpoint": {"keep": 1, "intervalSteps": 1, "intervalSeconds": 1}})
    assert spec.job.checkpoint.keep == 1
