"""Tiny pure-Python wheels written by hand (no build backend, no index): what a test
puts in a `--find-links` directory to stand for a package on PyPI."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def write_wheel(directory: Path, name: str, version: str, source: str) -> Path:
    """`<name>-<version>-py3-none-any.whl` in `directory`: module `name` holding `source`."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": source,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = [f"{path},sha256={_digest(text)},{len(text.encode())}" for path, text in files.items()]
    files[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _digest(text: str) -> str:
    raw = hashlib.sha256(text.encode()).digest()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
