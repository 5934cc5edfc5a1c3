"""What the layer checks of the operator (test_operator_layers.py) and the trainer
(test_trainer_layers.py) read from a package's source: its modules, what each imports
(and where: at module level or inside a function), and its functions longer than a
screen."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_FUNCTION_LINES = 60


def modules(root: Path, package: Path) -> dict[str, Path]:
    """Every module of `package` (a directory under `root`, the import root) by dotted
    name; a package's __init__ by the package's name."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(module: str, source: str, *, package: bool = False) -> list[tuple[int, str, bool]]:
    """(line, dotted name, at module level) of everything `module` imports, anywhere in
    its `source` (functions and TYPE_CHECKING blocks too, the latter counted as module
    level); relative imports resolved, `from pkg import mod` as `pkg.mod`. `package`:
    the module is a package's __init__."""
    here = module.split(".") if package else module.split(".")[:-1]
    tree = ast.parse(source)
    in_function = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for inner in ast.walk(node)
    }
    out: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        top = id(node) not in in_function
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here[: len(here) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            out += [(node.lineno, f"{base}.{alias.name}", top) for alias in node.names]
    return out


def imported(module: str, source: str, *, package: bool = False) -> list[tuple[int, str]]:
    """(line, dotted name) of everything `module` imports, wherever it does."""
    return [(line, name) for line, name, _ in imports(module, source, package=package)]


def long_functions(paths: list[Path], root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`path:line name: length` of every function in `paths` longer than `limit` lines."""
    return [
        f"{path.relative_to(root)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (node.end_lineno or node.lineno) - node.lineno + 1 > limit
    ]
