"""The operator's layers (the subpackages of operator/tuneop/, named in its package
docstring) hold, read from the source: each layer imports only the layers below it, the
pure ones (api, render, decide) no Kubernetes client, kopf or Prometheus client, and no
function is longer than a screen."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.layers import MAX_FUNCTION_LINES, imported, long_functions, modules

ROOT = Path(__file__).resolve().parents[2] / "operator"
PACKAGE = ROOT / "tuneop"

ALLOWED: dict[str, set[str]] = {
    "api": {"api"},
    "render": {"api", "render"},
    "decide": {"api", "render", "decide"},
    "act": {"api", "decide", "act"},
    "run": {"api", "render", "decide", "act", "run"},
}
"""The layers each layer may import (its own included): api at the bottom, render above
it, decide above render (a decision carries the objects it creates, rendered), act
above decide (it applies them as they are, rendering nothing), run on top."""

THIRD_PARTY: dict[str, set[str]] = {
    "kubernetes": {"act", "run"},
    "kopf": {"run"},
    "prometheus_client": {"run"},
}
"""Where each client library may be imported; the pure layers import none of them."""


def layer_of(module: str) -> str | None:
    """The layer of a module of the operator (None: the package's own __init__ and
    __main__, which stand above the layers, or a module outside every layer)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def violations(module: str, source: str, *, package: bool = False) -> list[tuple[int, str]]:
    """(line, what) of each import of `module` its layer may not make."""
    layer = layer_of(module)
    assert layer is not None, module
    found = []
    for line, name in imported(module, source, package=package):
        top, _, rest = name.partition(".")
        target = rest.split(".")[0] if top == "tuneop" else None
        if (target in ALLOWED and target not in ALLOWED[layer]) or (
            top in THIRD_PARTY and layer not in THIRD_PARTY[top]
        ):
            found.append((line, f"{layer} imports {name}"))
    return found


def test_every_module_is_in_a_layer():
    loose = [
        m
        for m in modules(ROOT, PACKAGE)
        if layer_of(m) is None and m not in ("tuneop", "tuneop.__main__")
    ]
    assert loose == [], "put each module in one of " + ", ".join(ALLOWED)
    assert {layer_of(m) for m in modules(ROOT, PACKAGE)} - {None} == set(ALLOWED)


def test_each_layer_imports_only_the_layers_below_it():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for module, path in modules(ROOT, PACKAGE).items()
        if layer_of(module) is not None
        for line, what in violations(module, path.read_text(), package=path.name == "__init__.py")
    ]
    assert found == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("tuneop.decide.x", "from ..act import kube", ["decide imports tuneop.act.kube"]),
        ("tuneop.api.x", "from ..render.children import build_pvc", ["api imports tuneop.render"]),
        ("tuneop.render.x", "from .. import decide", ["render imports tuneop.decide"]),
        ("tuneop.decide", "from .. import run", ["decide imports tuneop.run"]),
        ("tuneop.api.x", "import kubernetes.client", ["api imports kubernetes.client"]),
        ("tuneop.decide.x", "def f():\n    import kopf", ["decide imports kopf"]),
        ("tuneop.act.x", "from prometheus_client import Counter", ["act imports prometheus"]),
        ("tuneop.act.x", "from ..decide.patch import Decision\nimport kubernetes", []),
        ("tuneop.run.x", "from ..act import kube\nfrom . import metrics\nimport kopf", []),
        ("tuneop.decide.x", "from . import job\nfrom ..api import status", []),
    ],
)
def test_the_check_sees_a_wrong_import(module: str, source: str, expected: list[str]):
    found = [what for _, what in violations(module, source, package=module.count(".") == 1)]
    assert len(found) == len(expected), found
    for got, want in zip(found, expected, strict=True):
        assert got.startswith(want)


def test_no_function_is_longer_than_a_screen():
    long = long_functions(list(modules(ROOT, PACKAGE).values()), ROOT)
    assert long == [], f"split these into named steps of at most {MAX_FUNCTION_LINES} lines"
