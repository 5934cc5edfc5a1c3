"""`make demo`'s flow (hack/demo.py: the sample applied, its trainer evicted mid-epoch,
the resume, what it cost, the summary) on the suite's cluster, while another process
holds the trainer's metrics port on every address, as a second trainer run by hand or
any exporter on 9464 would. Local pods share the host's network, so that process
answers at the pod's IP: the demo must follow its own trainer (the record that names
its pod, else the one on its claim), never evict on what a stranger says."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import tuneop_contract as contract

from hack import demo
from tests.e2e.harness import Env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# What the stranger says: a trainer mid-epoch in a later trial, the moment the demo
# waits for, from the start (a demo that believed it evicted before any training).
STRANGER_PROGRESS = {
    "phase": contract.PHASE_RUNNING,
    "trial_id": "0001",
    "trials_completed": 1,
    "epoch": 0,
    "step": 3,
}


@contextmanager
def port_held_by_a_stranger(port: int, wait: float = 120) -> Iterator[list[str]]:
    """An HTTP server on 0.0.0.0:`port` answering every GET with STRANGER_PROGRESS;
    yields the paths it was asked for. Waits (up to `wait` s) for an earlier test's
    trainer pods to free the port."""

    asked: list[str] = []

    class Stranger(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = json.dumps(STRANGER_PROGRESS).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    deadline = time.monotonic() + wait
    while True:
        try:
            server = ThreadingHTTPServer(("0.0.0.0", port), Stranger)
            break
        except OSError as err:
            if time.monotonic() > deadline:
                raise AssertionError(f"port {port} stayed taken for {wait:.0f} s: {err}") from err
            time.sleep(1)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield asked
    finally:
        server.shutdown()
        server.server_close()


def test_the_demo_follows_its_own_trainer_while_a_stranger_holds_its_port(
    e2e: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEMO_PLOT", str(tmp_path / "demo.png"))
    run = demo.Demo(tmp_path, e2e.kubectl, e2e.cluster, namespace=e2e.namespace("demo"))
    with port_held_by_a_stranger(contract.DEFAULT_METRICS_PORT) as asked:
        demo.submit(run)
        demo.preempt(run)
        final = demo.wait_completed(run)
        passed = demo.report(run, final)
    out = capsys.readouterr().out
    assert passed, out[-3000:]
    assert asked, "the stranger was never asked: the demo did not meet it"
    # evicted once it had trained: resumed mid-epoch, or at the next epoch's start when
    # the eviction reached the trainer in the epoch's last steps (a loaded machine)
    restored = [e["message"] for e in e2e.kubectl.events(run.namespace, demo.NAME)]
    past_start = r"resumed trial \S+ at (step [1-9]\d* of epoch|an epoch boundary of epoch [1-9])"
    assert any(re.search(past_start, m) for m in restored), restored
    # the SIGTERM checkpoint was the step the new pod resumed at: nothing redone
    assert run.stopped_step is not None and "steps redone: 0 " in out, out[-3000:]
    assert "Traceback" not in out
    assert (tmp_path / "demo.png").stat().st_size > 0
