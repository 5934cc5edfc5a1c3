"""The client as pip installs it (`pip install ./contract ./client`): the `tuneop` and
`kubectl-tuneop` commands, and the shell scripts it runs shipped inside the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pip_installs_both_commands_and_the_scripts(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps",
         "--target", str(site), str(ROOT / "contract"), str(ROOT / "client")],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    scripts = site / "tuneop_client" / "scripts"
    for script in ("fetch-results.sh", "tensorboard.sh", "lib/claim-pod.sh"):
        assert (scripts / script).is_file(), script
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    for command in ("tuneop", "kubectl-tuneop"):
        shown = subprocess.run([str(site / "bin" / command), "--help"], env=env,
                               capture_output=True, text=True)  # fmt: skip
        assert shown.returncode == 0 and shown.stdout.startswith("usage: tuneop"), shown.stderr
    lost = subprocess.run([str(site / "bin" / "tuneop"), "list"], capture_output=True, text=True,
                          env=env | {"KUBECONFIG": str(tmp_path / "none")})  # fmt: skip
    assert lost.returncode == 1 and lost.stderr.startswith("tuneop list: no cluster"), lost
    assert "Traceback" not in lost.stderr
