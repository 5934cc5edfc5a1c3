"""The `tuneop` client against the real API server and operator, as a user runs it:
`tuneop run search.py --follow` with a module beside the script, a requirement from a
package index and `logs --follow` beside it, then `status`, `list`, `results` and
`delete`; a request the API server refuses leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tuneop_contract as contract

from tests.e2e.harness import PYTHONPATH, Env, wait_for
from tests.wheels import write_wheel

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

SCRIPT = Path(__file__).parent / "scripts" / "client_search" / "search.py"
DESCRIBE = (
    "import json\n\n\ndef describe(values):\n"
    "    return 'described by tuneop_e2e_extra: ' + json.dumps(values, sort_keys=True)\n"
)


def _command(e2e: Env, ns: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """`tuneop -n NS ...` (the client's module, as its console script runs it)."""
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "KUBECTL": str(e2e.kubectl.binary)}
    cmd = [sys.executable, "-m", "tuneop_client", "--kubeconfig", str(e2e.kubectl.kubeconfig),
           "-n", ns, *args]  # fmt: skip
    return cmd, env


def tuneop(e2e: Env, ns: str, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    cmd, env = _command(e2e, ns, *args)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def test_run_follow_logs_results_and_delete(e2e: Env, tmp_path: Path) -> None:
    ns = e2e.namespace("client")
    index = tmp_path / "index"  # the package index the trainer pods reach (host processes)
    index.mkdir()
    write_wheel(index, "tuneop_e2e_extra", "0.1.0", DESCRIBE)
    cmd, env = _command(
        e2e, ns, "run", str(SCRIPT), "--gpus", "1", "--follow",
        "--requirements", str(SCRIPT.parent / "requirements.txt"),
        "--env", "PIP_NO_INDEX=1", "--env", f"PIP_FIND_LINKS={index}",
        "--", "--epochs", "1",
    )  # fmt: skip
    running = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: e2e.kubectl.job(ns, "search") is not None, 60, "the job")
        streamed = tuneop(e2e, ns, "logs", "search", "--follow")  # until the job ends
        out, err = running.communicate(timeout=120)
    finally:
        running.kill()
    assert streamed.returncode == 0, streamed.stderr
    assert streamed.stdout.startswith("==> search-worker-0 (started "), streamed.stdout
    assert "best hyperparameters: {" in streamed.stdout, streamed.stdout[-2000:]
    assert "described by tuneop_e2e_extra: {" in streamed.stdout  # its requirement, installed
    ran = subprocess.CompletedProcess(cmd, running.returncode, out, err)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == f"tuningjob {ns}/search created (script in ConfigMap search-script)"
    assert any(line.startswith("Running  trial ") for line in lines), ran.stdout
    assert any(line.startswith("Succeeded  trials 2/2") for line in lines), ran.stdout
    assert lines[-3].split() == ["trial", "score", "hyperparameters"], ran.stdout
    assert "units=" in lines[-2] and "learning_rate=" in lines[-2], ran.stdout
    cm = e2e.kubectl.json("get", "configmap", "search-script", "-n", ns)
    assert sorted(cm["data"]) == ["model_lib.py", "requirements.txt", "search.py"]
    (packages,) = (e2e.claim_dir(ns) / contract.PACKAGES_DIR).iterdir()
    assert (packages / "tuneop_e2e_extra" / "__init__.py").read_text() == DESCRIBE
    owner = cm["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == (contract.KIND, "search")

    status = tuneop(e2e, ns, "status", "search")
    assert status.stdout.startswith("Succeeded  trials 2/2  best "), status.stdout
    listed = tuneop(e2e, ns, "list").stdout.splitlines()
    assert listed[0].split() == ["NAME", "STATE", "TRIALS", "BEST", "PREEMPTIONS"]
    assert listed[1].split()[:3] == ["search", "Succeeded", "2/2"], listed
    fetched = tuneop(e2e, ns, "results", "search", str(tmp_path / "out"))
    assert fetched.returncode == 0, fetched.stderr
    saved = tmp_path / "out" / contract.OUTPUTS_DIR / "best_hyperparameters.json"
    assert json.loads(saved.read_text()) == e2e.status(ns)["bestTrial"]["hyperparameters"]
    assert (tmp_path / "out" / contract.RESULTS_FILE).is_file()

    deleted = tuneop(e2e, ns, "delete", "search")
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: e2e.kubectl.job(ns, "search") is None, 60, "the job's deletion")
    gone = ("get", "configmap", "search-script", "-n", ns)
    wait_for(lambda: e2e.kubectl(*gone, check=False).returncode != 0, 60, "its ConfigMap gone")


def test_a_refused_job_leaves_nothing_behind_and_says_why_in_one_line(e2e: Env) -> None:
    ns = e2e.namespace("client-bad")
    refused = tuneop(e2e, ns, "run", str(SCRIPT), "--name", "bad", "--workers", "100")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("tuneop run: ") and "spec.distribution.workers" in line, line
    assert e2e.kubectl("get", "configmap", "bad-script", "-n", ns, check=False).returncode != 0
    bad = tuneop(e2e, ns, "run", str(SCRIPT), "--name", "Bad_Name")
    assert bad.returncode == 2 and bad.stderr.startswith("tuneop run: --name: 'Bad_Name'"), bad
    missing = tuneop(e2e, ns, "status", "nothing")
    assert missing.returncode == 1 and "not found" in missing.stderr, missing
