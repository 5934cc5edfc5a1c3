"""Where the cluster binaries are: the versioned cache filled by hack/cluster-tools/build.sh.

The cache key must match build.sh: ``<KUBERNETES_VERSION>-<sha256(versions.env)[:10]>``
under ``$TUNEOP_CACHE/bin`` (default ``~/.cache/tuneop/bin``).  ``TUNEOP_CLUSTER_BIN_DIR``
overrides the whole lookup (e.g. to try binaries built elsewhere).
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
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
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


def version_key() -> str:
    digest = hashlib.sha256(VERSIONS_FILE.read_bytes()).hexdigest()[:10]
    return f"{versions()['KUBERNETES_VERSION']}-{digest}"


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
