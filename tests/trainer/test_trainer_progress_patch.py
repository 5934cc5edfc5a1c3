"""The trainer's progress report: a JSON merge patch of its job's progress ConfigMap
(never the TuningJob), over TLS with the ServiceAccount token, throttled, never raising.
The API server here is a stand-in (a local HTTPS server recording requests), named as
such: tests/e2e checks the same path against the real kube-apiserver."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import tuneop_contract as contract
from tuneop_contract import Progress
from tuneop_trainer import progress as progress_mod
from tuneop_trainer.progress import _ProgressPatcher


def _cert(tmp: Path) -> tuple[Path, Path]:
    key, crt = tmp / "key.pem", tmp / "crt.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(crt), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, crt


def test_progress_report_is_a_throttled_merge_patch_of_the_configmap(tmp_path: Path) -> None:
    key, crt = _cert(tmp_path)
    seen: list[dict[str, Any]] = []
    fail = {"next": True}

    class FakeApiServer(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(
                {
                    "path": self.path,
                    "type": self.headers["Content-Type"],
                    "auth": self.headers["Authorization"],
                    "body": json.loads(body),
                    "at": time.monotonic(),
                }
            )
            code = 500 if fail.pop("next", False) else 200
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("s3cr3t\n")
    port = server.server_address[1]
    url = f"https://127.0.0.1:{port}/api/v1/namespaces/ns/configmaps/job-progress"
    try:
        patcher = _ProgressPatcher(url, token, crt)
        patcher.submit(Progress(step=1), force=False)  # answered 500: logged, not raised
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
        for step in range(2, 6):  # a burst: throttled into one patch with the last state
            patcher.submit(Progress(step=step), force=False)
        patcher.flush()
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.shutdown()
    assert len(seen) == 2, seen
    first, second = seen
    assert first["path"] == "/api/v1/namespaces/ns/configmaps/job-progress"
    assert first["type"] == "application/merge-patch+json"
    assert first["auth"] == "Bearer s3cr3t"
    assert contract.progress_from_configmap(first["body"])["step"] == 1
    assert second["body"] == {"data": {contract.PROGRESS_KEY: json.dumps(
        Progress(step=5).to_status(), sort_keys=True)}}  # fmt: skip
    assert contract.progress_from_configmap(second["body"]) == Progress(step=5).to_status()


def test_the_target_comes_from_the_env_the_pod_builder_sets(tmp_path: Path, monkeypatch) -> None:
    _, crt = _cert(tmp_path)
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text(crt.read_text())
    monkeypatch.setattr(progress_mod, "SA_DIR", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    monkeypatch.setenv(contract.ENV_JOB_NAMESPACE, "ml")
    monkeypatch.delenv(contract.ENV_PROGRESS_CONFIGMAP, raising=False)
    assert _ProgressPatcher.from_env() is None  # no ConfigMap named: no report
    monkeypatch.setenv(contract.ENV_PROGRESS_CONFIGMAP, "emg-progress")
    patcher = _ProgressPatcher.from_env()
    assert patcher is not None
    assert patcher.url == "https://10.0.0.1:6443/api/v1/namespaces/ml/configmaps/emg-progress"
