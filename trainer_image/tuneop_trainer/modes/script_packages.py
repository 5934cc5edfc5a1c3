"""A script's own pip packages (`spec.script.requirements`), installed once per claim
and requirements file, and imported the same after every preemption.

pip resolves the file against the image as it is (`--dry-run --report`), so only what
the image lacks is installed, and a requirement that would change one of the image's
packages (TensorFlow, Keras, NumPy…) is refused with a line naming it: the trainer's
own code never runs on other versions than its lock's. What the resolver chose is then
installed by exact version and hash into `<claim>/packages/<key>`, where the key hashes
the file, the Python version, the CPU architecture and the image's packages: a pod
started after a preemption, another worker of the group or a parallel trial finds it
there and imports the same files, even when the index has moved on. The directory is
made under a temporary name and renamed when complete, so a kill mid-install leaves
nothing a later pod would use; the pod's next start (same pod name) removes what its
killed install left, and any pod removes a staging directory a day old.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tuneop_contract import PACKAGES_DIR, write_atomic
from tuneop_contract.spec import SpecError

# Written last into a complete install: the resolver's report, for the record.
REPORT_FILE = "tuneop-report.json"
STALE_STAGING_SECONDS = 24 * 3600
"""A staging directory this old is a killed install's (no pip run takes a day)."""
PIP = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input")


class PackagesError(Exception):
    """pip could not install the requirements for a reason other than the file (the
    index unreachable, a build failing); str() is one line."""


def install(requirements: Path, claim: Path, field: str) -> Path:
    """The directory holding what `requirements` adds to the image, installing it first
    unless an earlier pod of this claim has. SpecError for a file pip refuses or one that
    would change the image's packages; PackagesError when pip fails otherwise."""
    text = _read(requirements, field)
    image = _image_packages()
    target = claim / PACKAGES_DIR / _key(text, image)
    if (target / REPORT_FILE).is_file():
        return target
    planned = _resolve(requirements, field)
    changed = sorted(n for n in planned if _canonical(n) in image)
    if changed:
        have = ", ".join(f"{n} {image[_canonical(n)]}" for n in changed)
        raise SpecError(field, f"would change the image's own {have}; build a derived image "
                        "(FROM the trainer image) for other versions of its packages")  # fmt: skip
    _install_atomically(planned, target)
    return target


def _read(requirements: Path, field: str) -> str:
    try:
        return requirements.read_text()
    except OSError as exc:
        raise SpecError(field, f"cannot read {requirements}: {exc.strerror}") from None


def _image_packages() -> dict[str, str]:
    """The image's distributions, canonical name → version."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[_canonical(name)] = dist.version
    return found


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _key(text: str, image: dict[str, str]) -> str:
    pins = "\n".join(f"{n}=={v}" for n, v in sorted(image.items()))
    material = f"{text}\n--\n{sys.version}\n{platform.machine()}\n--\n{pins}"
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def _resolve(requirements: Path, field: str) -> dict[str, dict[str, Any]]:
    """What pip would add to the image for `requirements`: name → the report's entry."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        done = subprocess.run(
            [*PIP, "install", "--dry-run", "--report", str(report), "-r", str(requirements)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise _refusal(done.stdout, field)
        planned = json.loads(report.read_text()).get("install") or []
    return {item["metadata"]["name"]: item for item in planned}


def _refusal(output: str, field: str) -> Exception:
    """SpecError when pip refuses the file, PackagesError when the index did not answer
    (pip then says "no versions", as if the package did not exist) or pip failed else."""
    unreachable = [line for line in output.splitlines() if _index_unreachable(line)]
    if unreachable:
        return PackagesError(f"{field}: the package index did not answer: {unreachable[0][:240]}")
    if _is_about_the_file(output):
        return SpecError(field, f"pip cannot install it: {_pip_error(output)}")
    return PackagesError(f"{field}: pip failed: {_pip_error(output)}")


def _is_about_the_file(stderr: str) -> bool:
    return any(
        marker in stderr
        for marker in ("Invalid requirement", "No matching distribution", "ResolutionImpossible",
                       "conflicting dependencies", "Could not find a version")
    )  # fmt: skip


def _index_unreachable(stderr: str) -> bool:
    return any(
        marker in stderr
        for marker in ("Retrying (Retry(", "NewConnectionError", "ConnectTimeout", "SSLError",
                       "ProxyError", "Read timed out", "Temporary failure in name resolution")
    )  # fmt: skip


def _pip_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["(no output)"])[0].removeprefix("ERROR: ")


def _install_atomically(planned: dict[str, dict[str, Any]], target: Path) -> None:
    """Install the planned distributions, by version and hash, into a temporary
    directory beside `target`, then rename it; a pod that loses the race keeps the
    winner's."""
    prefix = f".{target.name}.{socket.gethostname()}."
    _remove_stale_staging(target.parent, prefix)
    staging = target.parent / f"{prefix}{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        lines = [_pinned_line(item) for item in planned.values()]
        pinned = staging / "requirements.lock"
        pinned.write_text("".join(lines))
        hashed = ["--require-hashes"] if all("--hash=" in line for line in lines) else []
        if planned:
            done = subprocess.run(
                [*PIP, "install", "--no-deps", *hashed, "--target", str(staging),
                 "--no-warn-script-location", "--quiet", "-r", str(pinned)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise _refusal(done.stderr, "spec.script.requirements")
        report = {name: item["metadata"]["version"] for name, item in planned.items()}
        write_atomic(staging / REPORT_FILE, json.dumps(report, indent=1).encode())
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / REPORT_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_stale_staging(packages: Path, own: str) -> None:
    """Staging directories of a killed install: this pod's own (`own` prefix: a
    restarted pod keeps its name, and its earlier container is gone), and anyone's a
    day old."""
    if not packages.is_dir():
        return
    cutoff = time.time() - STALE_STAGING_SECONDS
    for entry in packages.iterdir():
        if not entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            stale = entry.name.startswith(own) or entry.stat().st_mtime < cutoff
        except OSError:  # removed meanwhile by another pod
            continue
        if stale:
            shutil.rmtree(entry, ignore_errors=True)


def _pinned_line(item: dict[str, Any]) -> str:
    """`name==version --hash=sha256:…` for what the resolver chose (its URL for a
    requirement given as one)."""
    meta, info = item["metadata"], item.get("download_info") or {}
    hashes = (info.get("archive_info") or {}).get("hashes") or {}
    line = info["url"] if item.get("is_direct") else f"{meta['name']}=={meta['version']}"
    if "sha256" in hashes:
        line += f" --hash=sha256:{hashes['sha256']}"
    return line + "\n"
