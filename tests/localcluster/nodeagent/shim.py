"""Build the bind() LD_PRELOAD shim (bindshim.c) once, cached by its source hash.

Test infrastructure. Without a C compiler the agent runs pods without it (and logs a
warning): wildcard binds then take the port on every pod's address.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("bindshim.c")
BIND_IP_ENV = "TUNEOP_POD_BIND_IP"
log = logging.getLogger("tuneop.nodeagent")


def cache_dir() -> Path:
    return Path(os.environ.get("TUNEOP_CACHE", Path.home() / ".cache" / "tuneop")) / "nodeagent"


def build_shim() -> Path | None:
    """Path of the compiled shim, building it if needed; None without a C compiler."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:10]
    target = cache_dir() / f"bindshim-{digest}.so"
    if target.exists():
        return target
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.warning("no C compiler: pods run without the bind shim (shared wildcard ports)")
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        result = subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(out), str(SOURCE), "-ldl"],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            log.warning("building the bind shim failed: %s", result.stderr.strip())
            return None
        os.replace(out, target)
    return target
