"""The trainer's floors (named in tuneop_trainer's package docstring and in
docs/design/trainer.md) hold, read from the source: each floor imports only the floors
below it, TensorFlow, Keras and keras-tuner are imported only where they may be (at
module level only in the floors that train), the command line and the spec parser load
none of them, and no function is longer than a screen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.layers import MAX_FUNCTION_LINES, imports, long_functions, modules

ROOT = Path(__file__).resolve().parents[2] / "trainer_image"
PACKAGE = ROOT / "tuneop_trainer"

GROUND = "ground"
"""The modules at the package's top (spec, exits, preemption, strategy, seeds, scope,
failed_trials): what every floor may use."""

ENTRY = {"tuneop_trainer", "tuneop_trainer.__main__", "tuneop_trainer.cli"}
"""The command: above every floor, may import any of them."""

_BELOW_ENGINE = {GROUND, "checkpoint", "parallel", "data", "report"}
ALLOWED: dict[str, set[str]] = {
    GROUND: {GROUND},
    "checkpoint": {GROUND, "checkpoint"},
    "parallel": {GROUND, "parallel"},
    "data": {GROUND, "checkpoint", "parallel", "data"},
    "report": {GROUND, "checkpoint", "parallel", "report"},
    "engine": _BELOW_ENGINE | {"engine"},
    "patches": _BELOW_ENGINE | {"engine", "patches"},
    "modes": _BELOW_ENGINE | {"engine", "patches", "modes"},
    "examples": {"examples"},
}
"""The floors each floor may import (its own included): the ground floor; checkpoint
and parallel on it; data and report above those; engine above all four; patches (every
change to Keras and keras-tuner) above the engine; modes (the front ends and the
process both run in) on top; examples (sample HyperModels) on its own."""

HEAVY = ("tensorflow", "keras", "keras_tuner")
TF_AT_MODULE_LEVEL = {"data", "engine", "parallel", "patches", "examples"}
"""The floors that may import TensorFlow, Keras or keras-tuner when a module loads."""
TF_IN_FUNCTIONS = TF_AT_MODULE_LEVEL | {GROUND, "modes"}
"""The floors that may import them at all (the others only inside a function): the
ground floor's strategy and seeds, and the modes, import them when they run, so the
command line, the spec parser and the volume checks start without them."""


def floor_of(module: str) -> str | None:
    """The floor of a module of the trainer, or of what a name imported from it is in
    (None: the command, which stands above the floors)."""
    parts = module.split(".")
    if len(parts) < 2 or ".".join(parts[:2]) in ENTRY:
        return None
    if parts[1] in ALLOWED or (len(parts) > 2 and (PACKAGE / parts[1]).is_dir()):
        return parts[1]
    return GROUND


def violations(module: str, source: str, *, package: bool = False) -> list[tuple[int, str]]:
    """(line, what) of each import of `module` its floor may not make."""
    floor = floor_of(module)
    assert floor is not None, module
    found = []
    for line, name, top_level in imports(module, source, package=package):
        first = name.split(".")[0]
        if first == "tuneop_trainer":
            target = floor_of(name)
            if target is None or target not in ALLOWED[floor]:
                found.append((line, f"{floor} imports {name}"))
        elif first in HEAVY:
            allowed = TF_AT_MODULE_LEVEL if top_level else TF_IN_FUNCTIONS
            if floor not in allowed:
                where = "at module level" if top_level else "in a function"
                found.append((line, f"{floor} imports {name} {where}"))
    return found


def test_every_module_is_on_a_floor():
    floors = {floor_of(m) for m in modules(ROOT, PACKAGE)} - {None}
    assert floors == set(ALLOWED), "name each floor in ALLOWED, with what it may import"


def test_each_floor_imports_only_the_floors_below_it():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for module, path in modules(ROOT, PACKAGE).items()
        if floor_of(module) is not None
        for line, what in violations(module, path.read_text(), package=path.name == "__init__.py")
    ]
    assert found == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("tuneop_trainer.checkpoint.x", "from ..engine import runtime", ["checkpoint imports"]),
        ("tuneop_trainer.data.inputs.x", "from ...patches import fit", ["data imports"]),
        ("tuneop_trainer.engine.x", "from ..modes.runner import Program", ["engine imports"]),
        ("tuneop_trainer.spec", "from .checkpoint import cadence", ["ground imports"]),
        ("tuneop_trainer.parallel", "from .. import data", ["parallel imports"]),
        ("tuneop_trainer.report.x", "import keras", ["report imports keras at module"]),
        ("tuneop_trainer.modes.x", "import tensorflow as tf", ["modes imports tensorflow at"]),
        ("tuneop_trainer.checkpoint.x", "def f():\n    import keras_tuner", ["checkpoint imports"]),
        ("tuneop_trainer.exits", "import keras", ["ground imports keras at module level"]),
        ("tuneop_trainer.seeds", "def f():\n    import tensorflow as tf", []),
        ("tuneop_trainer.modes.x", "def f():\n    import keras\nfrom ..patches import fit", []),
        ("tuneop_trainer.patches.x", "import keras\nfrom ..engine import fit\nfrom . import y", []),
        ("tuneop_trainer.data.inputs.x", "from ...checkpoint import fingerprint", []),
        ("tuneop_trainer.modes.x", "from .. import cli", ["modes imports tuneop_trainer.cli"]),
        ("tuneop_trainer.data.x", "from ..spec import SpecError\nfrom .. import seeds", []),
    ],
)
def test_the_check_sees_a_wrong_import(module: str, source: str, expected: list[str]):
    package = (ROOT / Path(*module.split("."))).is_dir()
    found = [what for _, what in violations(module, source, package=package)]
    assert len(found) == len(expected), found
    for got, want in zip(found, expected, strict=True):
        assert got.startswith(want), got


def test_the_command_and_the_spec_parser_load_no_tensorflow():
    code = (
        "import sys, tuneop_trainer.cli, tuneop_trainer.spec; "
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    path = os.pathsep.join(str(ROOT.parent / d) for d in ("contract", "trainer_image"))
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_no_function_is_longer_than_a_screen():
    long = long_functions(list(modules(ROOT, PACKAGE).values()), ROOT)
    assert long == [], f"split these into named steps of at most {MAX_FUNCTION_LINES} lines"
