"""The progress record: progress.json readable by the contract, /progress and /metrics."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from trainer_helpers import SCRIPTS, env
from tuneop_contract import (
    ENV_POD_NAME,
    EXIT_INVALID_SPEC,
    EXIT_PREEMPTED,
    PHASE_RUNNING,
    is_volume_error,
    read_progress,
)
from tuneop_trainer.report.progress import Reporter, carried_on

from tests.e2e.harness import fetch_progress
from tests.forkserver import launch


def test_progress_file_and_endpoint(tmp_path: Path) -> None:
    reporter = Reporter(tmp_path, min_interval=3600)
    port = reporter.serve(port=0, address="127.0.0.1")
    assert port
    try:
        reporter.update(force=True, phase=PHASE_RUNNING, trial_id="0003", trials_total=5)
        reporter.step(epoch=1, step=7)  # throttled: not yet in the file
        on_disk = read_progress(tmp_path)
        assert on_disk is not None and on_disk.trial_id == "0003" and on_disk.step == 0
        reporter.checkpointed(0.01)  # a checkpoint always publishes
        on_disk = read_progress(tmp_path)
        assert on_disk is not None and (on_disk.epoch, on_disk.step) == (1, 7)
        assert on_disk.last_checkpoint_time and on_disk.last_progress_time
        assert on_disk.to_status()["trialsTotal"] == 5

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=5) as resp:
            served = json.loads(resp.read())
        assert served["trial_id"] == "0003" and served["step"] == 7
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        assert "tuneop_trainer_steps_total 1.0" in metrics
        assert "tuneop_trainer_checkpoints_total 1.0" in metrics
        assert "tuneop_trainer_trials_total_planned 5.0" in metrics
    finally:
        reporter.close()


def test_a_new_process_carries_on_the_searchs_record_not_its_trial(tmp_path: Path) -> None:
    """A trainer restarted after a preemption: its first report keeps what the search
    has done (trials completed, the best so far, restores), never 0 trials done until
    its next trial ends; what the killed process was doing it reports anew."""
    before = Reporter(tmp_path, min_interval=3600)
    before.update(force=True, phase=PHASE_RUNNING, trial_id="0004", trials_completed=3,
                  trials_total=5, best_trial_id="0002", best_score=0.9, restores=1,
                  top_trials=[{"trialId": "0002", "score": 0.9}])  # fmt: skip
    before.step(epoch=2, step=7)
    before.close()
    after = Reporter(tmp_path, min_interval=3600)
    after.update(**carried_on(after.previous()))
    first = after.progress
    assert (first.trials_completed, first.trials_total, first.restores) == (3, 5, 1)
    assert (first.best_trial_id, first.best_score) == ("0002", 0.9)
    assert first.top_trials == [{"trialId": "0002", "score": 0.9}]
    assert (first.phase, first.trial_id, first.step) == ("Starting", None, 0)
    assert carried_on(None) == {}


@pytest.mark.parametrize("refused", [False, True], ids=["own", "refused"])
def test_no_record_a_restarted_trainer_publishes_says_fewer_trials_done(
    tmp_path: Path, refused: bool
) -> None:
    """The trainer as started after a preemption (modes/runner.run_program): every record
    it publishes, the first included (the runtime reports its checkpoint cadence as it is
    made), carries on the search's trials done; a trainer refused the volume (another
    job's search) shows none of them."""
    before = Reporter(tmp_path, min_interval=3600)
    before.update(force=True, phase=PHASE_RUNNING, trial_id="0004", trials_completed=3)
    before.close()
    code, log = first_reports(tmp_path, "refuse" if refused else "own")
    assert code == (EXIT_INVALID_SPEC if refused else EXIT_PREEMPTED), log.read_text()
    published = json.loads((tmp_path / "published.json").read_text())
    assert published, log.read_text()
    assert set(published) == ({0} if refused else {3}), published


def first_reports(root: Path, mode: str) -> tuple[int, Path]:
    log = root / "trainer.log"
    return launch([str(SCRIPTS / "first_reports.py"), str(root), mode], env(), log).wait(), log


def test_a_volume_that_refuses_a_write_at_start_up_is_exit_75_with_its_message(
    tmp_path: Path,
) -> None:
    """The search's own start-up writes (its fingerprint, its projects record) meet a
    full volume: exit 75 and the contract's one-line volume message (the operator backs
    off and says so), not a traceback and a failure."""
    before = Reporter(tmp_path, min_interval=3600)
    before.update(force=True, phase=PHASE_RUNNING, trial_id="0004", trials_completed=3)
    before.close()
    code, log = first_reports(tmp_path, "full")
    assert code == EXIT_PREEMPTED, log.read_text()
    assert "Traceback" not in log.read_text()
    line = log.read_text().strip().splitlines()[-1]
    assert line.startswith("error: ") and is_volume_error(line.removeprefix("error: ")), line
    assert set(json.loads((tmp_path / "published.json").read_text())) <= {3}  # never fewer


def test_progress_names_its_pod_so_a_reader_can_tell_another_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pods on one host share its ports: a reader of podIP:port checks who answered."""
    monkeypatch.setenv(ENV_POD_NAME, "search-worker-0")
    reporter = Reporter(tmp_path, min_interval=3600)
    port = reporter.serve(port=0, address="127.0.0.1")

    class Squatter(BaseHTTPRequestHandler):  # another exporter on a port, any JSON
        def do_GET(self) -> None:  # JSON on /progress, 404 (as a file server) elsewhere
            body = b'{"trial_id": "9", "step": 1}'
            self.send_response(200 if self.path == "/progress" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), Squatter)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        reporter.update(force=True, phase=PHASE_RUNNING, trial_id="0003")
        ours = f"http://127.0.0.1:{port}/progress"
        record, foreign = fetch_progress(ours, "search-worker-0")
        assert (record or {}).get("trial_id") == "0003" and not foreign
        assert fetch_progress(ours, "search-worker-1") == (None, True)
        squatter = f"http://127.0.0.1:{other.server_address[1]}/progress"
        assert fetch_progress(squatter, "search-worker-0") == (None, True)
        not_found = squatter.replace("/progress", "/nothing")
        assert fetch_progress(not_found, "search-worker-0") == (None, True)
        assert fetch_progress("http://127.0.0.1:9/progress", "search-worker-0") == (None, False)
    finally:
        other.shutdown()
        reporter.close()
