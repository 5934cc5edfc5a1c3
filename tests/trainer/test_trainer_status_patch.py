"""The trainer's status patch: a JSON merge patch of status.progress on its TuningJob's
status subresource, over TLS with the ServiceAccount token, throttled, never raising.
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

from tuneop_contract import Progress
from tuneop_trainer.progress import _StatusPatcher


def _cert(tmp: Path) -> tuple[Path, Path]:
    key, crt = tmp / "key.pem", tmp / "crt.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(crt), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, crt


def test_status_patch_is_a_throttled_merge_patch(tmp_path: Path) -> None:
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
    url = f"https://127.0.0.1:{port}/apis/tuneop.io/v1alpha1/namespaces/ns/tuningjobs/job/status"
    try:
        patcher = _StatusPatcher(url, token, crt)
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
    assert first["path"] == "/apis/tuneop.io/v1alpha1/namespaces/ns/tuningjobs/job/status"
    assert first["type"] == "application/merge-patch+json"
    assert first["auth"] == "Bearer s3cr3t"
    assert first["body"]["status"]["progress"]["step"] == 1
    assert second["body"] == {"status": {"progress": Progress(step=5).to_status()}}
