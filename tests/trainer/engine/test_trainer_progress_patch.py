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
from tuneop_trainer.report import progress as progress_mod
from tuneop_trainer.report.progress import _ProgressPatcher


def _cert(tmp: Path) -> tuple[Path, Path]:
    key, crt = tmp / "key.pem", tmp / "crt.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(crt), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, crt


def test_progress_report_is_a_coalesced_merge_patch_of_the_configmap(
    tmp_path: Path, monkeypatch
) -> None:
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
    monkeypatch.setenv(contract.ENV_PROGRESS_INTERVAL, "30")
    try:
        patcher = _ProgressPatcher(url, token, crt)
        patcher.submit(Progress(step=1), urgent=True)  # answered 500: logged, not raised
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
        for step in range(2, 6):  # steady steps: held for the interval, the last one kept
            patcher.submit(Progress(step=step), urgent=False)
        time.sleep(1.0)
        assert len(seen) == 1, "a steady step was sent before the interval"
        patcher.flush()  # at exit
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


class _Recorder:
    """Stands in for the ConfigMap patcher: what the Reporter submits, and how."""

    def __init__(self) -> None:
        self.sent: list[tuple[Progress, bool]] = []

    def submit(self, progress: Progress, urgent: bool) -> None:
        self.sent.append((progress, urgent))

    def flush(self, timeout: float = 5.0) -> None:
        pass


def test_milestones_are_sent_at_once_and_steady_steps_coalesced(tmp_path: Path) -> None:
    reporter = progress_mod.Reporter(tmp_path, min_interval=0.0)
    recorder = _Recorder()
    reporter._patcher = recorder  # type: ignore[assignment]
    reporter.update(phase=contract.PHASE_RUNNING, trial_id="00")
    reporter.step(0, 1)  # the process's first step: a recovery ends here
    reporter.step(0, 2)
    reporter.checkpointed(0.1, position=(0, 2))  # written to the volume, not urgent
    reporter.step(0, 3)
    reporter.update(force=True, trial_id="01", trials_completed=1)  # a trial ends
    reporter.step(0, 1)
    urgent = [(p.trial_id, p.step) for p, u in recorder.sent if u]
    steady = [(p.trial_id, p.step) for p, u in recorder.sent if not u]
    assert urgent == [("00", 0), ("00", 1), ("01", 3)]
    assert steady == [("00", 2), ("00", 2), ("00", 3), ("01", 1)]


def test_the_interval_comes_from_the_env_and_a_bad_one_is_the_default() -> None:
    key = contract.ENV_PROGRESS_INTERVAL
    assert progress_mod.patch_interval({}) == contract.DEFAULT_PROGRESS_INTERVAL_SECONDS
    assert progress_mod.patch_interval({key: "7.5"}) == 7.5
    for bad in ("0", "-1", "soon", "1e9"):
        assert progress_mod.patch_interval({key: bad}) == contract.DEFAULT_PROGRESS_INTERVAL_SECONDS


def test_an_urgent_record_overtaken_by_a_newer_one_passes_its_urgency_on(tmp_path: Path) -> None:
    """The checkpoint writer's thread may publish a newer record just before the
    training thread's urgent one: the newer record is then sent at once."""
    reporter = progress_mod.Reporter(tmp_path, min_interval=0.0)
    recorder = _Recorder()
    reporter._patcher = recorder  # type: ignore[assignment]
    newer = Progress(step=2)
    reporter._publish(newer, False, 2)
    reporter._publish(Progress(step=1), True, 1)  # stale, but urgent
    assert recorder.sent[-1] == (newer, True)
