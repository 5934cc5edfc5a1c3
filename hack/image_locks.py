#!/usr/bin/env python3
"""The images' lock files, requirements/{trainer-gpu,trainer-cpu,operator}.lock
(`make lock-images`).

Inputs, one source per fact: what an image needs is its package's pyproject.toml (the
trainer's dependencies plus the `gpu` or `cpu` extra; the operator's dependencies); the
versions it is tested with are requirements/dev.lock, passed to pip as constraints, so
every package the dev venv also has gets the dev venv's version. pip's resolver picks the
rest (the nvidia-* CUDA wheels, a few packages dev.lock lacks) and writes a report; the
lock is that report, one `name==version` a line, and the Dockerfile installs it with
--no-deps.

Resolution fetches metadata only: `--dry-run` installs nothing, and `--use-feature=fast-deps`
reads each wheel's METADATA with HTTP range requests where the index does not serve it on
its own (PEP 658). A full archive download (the CUDA wheels are several GB) is a bug here:
pip is stopped at the first one.

pip evaluates environment markers and wheel tags for the interpreter that runs it, so this
runs on the image's platform only: CPython 3.11 on Linux x86_64 (python:3.11-slim, amd64).
Stdlib only, so any such python3 with pip >= 23.1 runs it.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "trainer_image" / "pyproject.toml"
OPERATOR_PYPROJECT = ROOT / "operator" / "pyproject.toml"
DEV_LOCK = ROOT / "requirements" / "dev.lock"
VARIANTS = ("gpu", "cpu")
# Every lock this writes: the trainer's variants and the operator's.
LOCKS = (*VARIANTS, "operator")
# Local distributions, installed from the build context, never locked.
LOCAL = ("tuneop-contract", "tuneop", "tuneop-trainer")
IMAGE_PYTHON = (3, 11)
IMAGE_MACHINE = "x86_64"
# pip settings from the environment that would change the answer (extra wheel
# directories, constraints of the caller's own).
PIP_ENV_DROPPED = ("PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_NO_DEPS", "PIP_NO_INDEX")
FULL_DOWNLOAD = re.compile(r"^\s*Downloading (\S+\.(?:whl|tar\.gz|zip)) \(")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.!+_-]+)$")


class ResolveError(RuntimeError):
    """pip's resolver refused the requirements (its output is the message)."""


def canonical(name: str) -> str:
    """PEP 503 normalised name: ``PyYAML`` → ``pyyaml``, ``ml_dtypes`` → ``ml-dtypes``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_path(variant: str) -> Path:
    """A trainer variant's lock, or the operator's for ``"operator"``."""
    name = "operator" if variant == "operator" else f"trainer-{variant}"
    return ROOT / "requirements" / f"{name}.lock"


def read_pins(path: Path) -> dict[str, str]:
    """Canonical name → version of a lock file; a line that is not ``name==version``
    (comments and blank lines aside) or a package pinned twice is an error."""
    pins: dict[str, str] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        if match is None:
            raise ValueError(f"{path.name}:{n}: not pinned as name==version: {line!r}")
        name = canonical(match.group(1))
        if name in pins:
            raise ValueError(f"{path.name}:{n}: {name} pinned twice")
        pins[name] = match.group(2)
    return pins


def _external(dependencies: Iterable[str]) -> list[str]:
    return [d for d in dependencies if canonical(re.split(r"[\[=<>!~ ;]", d)[0]) not in LOCAL]


def trainer_specs(variant: str) -> list[str]:
    """The trainer's requirements for one variant (the local packages are not locked)."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    return _external(project["dependencies"]) + list(project["optional-dependencies"][variant])


def image_specs(lock: str) -> list[str]:
    """The requirements behind one of :data:`LOCKS`."""
    if lock == "operator":
        return _external(tomllib.loads(OPERATOR_PYPROJECT.read_text())["project"]["dependencies"])
    return trainer_specs(lock)


def platform_problem() -> str | None:
    """Why this interpreter cannot resolve for the image, or None."""
    here = (sys.implementation.name, sys.platform, platform.machine(), sys.version_info[:2])
    want = ("cpython", "linux", IMAGE_MACHINE, IMAGE_PYTHON)
    if here != want:
        return f"resolving for the image needs {want} (markers and wheel tags), this is {here}"
    return None


def pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PIP_ENV_DROPPED}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def resolve(
    requirements: Iterable[str],
    constraints: Path | None = None,
    python: str = sys.executable,
    metadata_only: bool = True,
) -> dict[str, str]:
    """What pip would install for ``requirements`` (with dependencies, nothing installed
    or downloaded beyond metadata): canonical name → version. Raises :class:`ResolveError`
    if the resolver refuses, RuntimeError if pip starts downloading a whole archive."""
    with tempfile.TemporaryDirectory(prefix="tuneop-resolve-") as tmp:
        report = Path(tmp) / "report.json"
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text("".join(f"{r}\n" for r in requirements))
        cmd = [
            python, "-m", "pip", "install", "--dry-run", "--ignore-installed",
            "--only-binary=:all:", "--use-feature=fast-deps", "--progress-bar=off",
            "--disable-pip-version-check", "--report", str(report), "-r", str(reqs),
        ]  # fmt: skip
        if constraints is not None:
            cmd += ["-c", str(constraints)]
        lines = _run_pip(cmd, metadata_only)
        if not report.exists():
            raise ResolveError("".join(lines))
        installs = json.loads(report.read_text())["install"]
    return {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


def _run_pip(cmd: Sequence[str], metadata_only: bool) -> list[str]:
    lines: list[str] = []
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=pip_env()
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            match = FULL_DOWNLOAD.match(line)
            if match and metadata_only:
                proc.kill()
                raise RuntimeError(
                    f"pip started downloading the whole {match.group(1)}; resolution must "
                    "fetch metadata only (PEP 658 or HTTP range requests)"
                )
    return lines


def write_lock(variant: str, python: str = sys.executable) -> Path:
    # The operator's wheels are small and its index serves no metadata of its own for
    # some of them: pip may download them whole. The trainer's CUDA wheels never.
    pins = resolve(
        image_specs(variant), DEV_LOCK, python=python, metadata_only=variant != "operator"
    )
    if "tensorflow" in pins and "tensorflow-cpu" in pins:
        raise RuntimeError(f"{variant}: both tensorflow and tensorflow-cpu resolved")
    source = (
        "operator/pyproject.toml"
        if variant == "operator"
        else f"trainer_image/pyproject.toml and its [{variant}] extra"
    )
    image = "operator image" if variant == "operator" else f"{variant} trainer image"
    header = (
        "# Generated by `make lock-images` (hack/image_locks.py) from\n"
        f"# {source}, constrained by\n"
        f"# requirements/dev.lock. Every package the {image} installs\n"
        "# (pip --no-deps), for CPython 3.11 on Linux x86_64.\n"
    )
    body = "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))
    path = lock_path(variant)
    path.write_text(header + body)
    return path


def main(argv: Sequence[str]) -> int:
    problem = platform_problem()
    if problem:
        print(f"lock-images: {problem}", file=sys.stderr)
        return 1
    for variant in argv or LOCKS:
        if variant not in LOCKS:
            print(f"lock-images: unknown lock {variant!r} (one of {LOCKS})", file=sys.stderr)
            return 2
        path = write_lock(variant)
        print(f"{path.relative_to(ROOT)}: {len(read_pins(path))} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
