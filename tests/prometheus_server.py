"""Debian's prometheus and promtool for the tests (found on PATH, else installed by
hack/prometheus.sh), and a prometheus server on a free loopback port: the alert tests
run the shipped rules on it, against the operator's metrics collector
(tests/unit/test_alerts.py) and against the real operator (tests/e2e)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.localcluster.controlplane import free_port

ROOT = Path(__file__).resolve().parents[1]


def prometheus_tool(name: str) -> str:
    """`promtool` or `prometheus` of Debian's package, installed by hack/prometheus.sh
    when missing."""
    found = shutil.which(name)
    if found:
        return found
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / "prometheus.sh")],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    return str(Path(out.strip().splitlines()[-1]) / name)


class Prometheus:
    """`prometheus` on a free 127.0.0.1 port with `config` as its prometheus.yml; the
    file, its data (data/) and its log (prometheus.log) under `workdir`."""

    def __init__(self, config: dict[str, Any], workdir: Path, binary: str | None = None) -> None:
        self.port = free_port()
        self.workdir = workdir
        path = workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / "prometheus.log"
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [
                    binary or prometheus_tool("prometheus"),
                    f"--config.file={path}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def check_running(self) -> None:
        """AssertionError with the end of its log if prometheus exited."""
        assert self.proc.poll() is None, self.log_path.read_text()[-2000:]

    def answer(self, path: str) -> Any:
        """The whole JSON answer of `/api/v1/<path>` (OSError until it listens)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())

    def get(self, path: str) -> Any:
        """The data of a successful answer of `/api/v1/<path>`."""
        self.check_running()
        answer = self.answer(path)
        assert answer["status"] == "success", answer
        return answer["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """The active alerts; none while it does not answer yet."""
        with contextlib.suppress(OSError):
            return list(self.get("alerts")["alerts"])
        return []

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
