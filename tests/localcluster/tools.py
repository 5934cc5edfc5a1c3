"""Where the cluster binaries are: the versioned cache filled by hack/cluster-tools/build.sh.

The cache keys must match build.sh, under ``$TUNEOP_CACHE/bin`` (default
``~/.cache/tuneop/bin``): ``<KUBERNETES_VERSION>-<sha256(versions.env less the lines naming
KUEUE or KWOK)[:10]>`` for Kubernetes, etcd, helm and kubeconform,
``kueue-<KUEUE_VERSION>-<sha256(the lines naming KUEUE)[:10]>`` for Kueue (so a Kueue bump
rebuilds only Kueue) and ``kwok-<KWOK_VERSION>-<sha256(the lines naming KWOK)[:10]>`` for
kwok (`build.sh kwok`; only the scale benchmark uses it).
``TUNEOP_CLUSTER_BIN_DIR`` / ``TUNEOP_KUEUE_DIR`` override the lookups (e.g. to try
binaries built elsewhere).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO_ROOT / "hack" / "cluster-tools"
VERSIONS_FILE = TOOLS_DIR / "versions.env"
BUILD_SCRIPT = TOOLS_DIR / "build.sh"
BIN_DIR_ENV = "TUNEOP_CLUSTER_BIN_DIR"
KUEUE_DIR_ENV = "TUNEOP_KUEUE_DIR"
KUEUE_MARK = "KUEUE"
KWOK_MARK = "KWOK"
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kubelet",
    "kube-scheduler",
    "kubectl",
    "helm",
    "kubeconform",
)


def cache_dir() -> Path:
    return Path(os.environ.get("TUNEOP_CACHE", Path.home() / ".cache" / "tuneop"))


def versions() -> dict[str, str]:
    """The pinned versions, e.g. ``{"KUBERNETES_VERSION": "v1.35.4", ...}``."""
    out: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            out[name.strip()] = value.strip()
    return out


def _digest(lines: list[str]) -> str:
    """sha256 of ``lines`` as ``grep`` prints them (each ending in a newline), 10 hex."""
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()[:10]


def helm_kube_version() -> list[str]:
    """`helm template`'s flag for the pinned Kubernetes version: helm built from its module
    renders for v1.20 by default, and the chart's kubeVersion asks for 1.30 or newer."""
    return ["--kube-version", versions()["KUBERNETES_VERSION"]]


def version_key() -> str:
    lines = VERSIONS_FILE.read_text().splitlines()
    digest = _digest([line for line in lines if KUEUE_MARK not in line and KWOK_MARK not in line])
    return f"{versions()['KUBERNETES_VERSION']}-{digest}"


def kueue_key() -> str:
    lines = VERSIONS_FILE.read_text().splitlines()
    digest = _digest([line for line in lines if KUEUE_MARK in line])
    return f"kueue-{versions()['KUEUE_VERSION']}-{digest}"


def expected_bin_dir() -> Path:
    override = os.environ.get(BIN_DIR_ENV)
    if override:
        return Path(override)
    return cache_dir() / "bin" / version_key()


def is_complete(path: Path) -> bool:
    return all(os.access(path / name, os.X_OK) for name in BINARIES)


def bin_dir(build: bool = False) -> Path:
    """The directory holding the binaries; with ``build=True`` build them if missing.

    Without ``build`` a missing cache raises FileNotFoundError naming the make target
    (a cold build takes tens of minutes, too long to hide inside a test fixture).
    """
    path = expected_bin_dir()
    if is_complete(path):
        return path
    if build and not os.environ.get(BIN_DIR_ENV):
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True
        )
        path = Path(result.stdout.strip().splitlines()[-1])
        if is_complete(path):
            return path
    missing = [name for name in BINARIES if not os.access(path / name, os.X_OK)]
    raise FileNotFoundError(
        f"cluster binaries missing in {path} ({', '.join(missing)}): run `make cluster-tools`"
    )


def kueue_dir(build: bool = False) -> Path:
    """Kueue's cache dir: ``kueue`` (the manager), ``crds/``, ``webhooks.yaml`` (its
    webhook configurations), ``rbac-*.yaml``; with ``build=True`` built if missing."""
    override = os.environ.get(KUEUE_DIR_ENV)
    path = Path(override) if override else cache_dir() / "bin" / kueue_key()
    if os.access(path / "kueue", os.X_OK) and (path / "webhooks.yaml").is_file():
        return path
    if build and not override:
        subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.DEVNULL)
        return kueue_dir()
    raise FileNotFoundError(f"Kueue missing in {path}: run `make cluster-tools`")


def kwok_dir(build: bool = False) -> Path:
    """kwok's cache dir: ``kwok`` (the binary) and ``stages/`` (upstream Stage objects of the
    same version); with ``build=True`` built if missing (about 2 min cold)."""
    lines = VERSIONS_FILE.read_text().splitlines()
    digest = _digest([line for line in lines if KWOK_MARK in line])
    path = cache_dir() / "bin" / f"kwok-{versions()['KWOK_VERSION']}-{digest}"
    if os.access(path / "kwok", os.X_OK) and (path / "stages").is_dir():
        return path
    if build:
        subprocess.run(["bash", str(BUILD_SCRIPT), "kwok"], check=True, stdout=subprocess.DEVNULL)
        return kwok_dir()
    raise FileNotFoundError(f"kwok missing in {path}: run hack/cluster-tools/build.sh kwok")
