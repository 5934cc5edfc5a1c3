"""`tuneop logs -f` across a preemption, without a cluster: a scripted sequence of what
the API server lists (FakeCluster), and `echo` in kubectl's place, so the commands the
client would run are what it prints."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

import pytest
from tuneop_client import log_stream as logs


def _pod(
    uid: str, created: str, state: str | None, name: str = "search-worker-0"
) -> dict[str, Any]:
    statuses = [{"name": "trainer", "state": {state: {}}}] if state else []
    meta = {"name": name, "uid": uid, "creationTimestamp": created}
    return {"metadata": meta, "status": {"containerStatuses": statuses}}


class FakeCluster:
    """Each poll returns the next (job phase, pods) of `script`; the last one repeats."""

    namespace = "ml"

    def __init__(self, script: list[tuple[str, list[dict[str, Any]]]]) -> None:
        self.script, self.polls = script, 0

    def job(self, name: str) -> dict[str, Any]:
        phase, _ = self.script[min(self.polls, len(self.script) - 1)]
        return {"spec": {}, "status": {"phase": phase}}

    def pods(self, job: str) -> list[dict[str, Any]]:
        _, pods = self.script[min(self.polls, len(self.script) - 1)]
        self.polls += 1
        return pods


def test_follow_streams_each_pod_the_operator_starts_until_the_job_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logs, "POLL_SECONDS", 0.01)
    first, second = _pod("a", "t1", "running"), _pod("b", "t2", "running")
    cluster = FakeCluster([
        ("Running", [_pod("a", "t1", None)]),  # pending: no log yet
        ("Running", [first]),
        ("Running", [first]),
        ("Running", []),  # preempted: the pod is gone
        ("Running", [_pod("b", "t2", None), _pod("x", "t0", "running", "search-probe-0")]),
        ("Running", [second]),
        ("Succeeded", [second]),
    ])  # fmt: skip
    said: list[str] = []
    started: list[list[str]] = []

    def start(cmd: Sequence[str]) -> subprocess.Popen[bytes]:
        started.append(list(cmd))
        return subprocess.Popen(["true"])

    code = logs.follow_logs(cluster, "search", ["echo"], said.append, start)  # type: ignore[arg-type]
    assert code == 0
    assert said == [logs.header(first), logs.header(second)]
    assert started == [["echo", "logs", "-n", "ml", "search-worker-0", "-c", "trainer",
                        "--follow"]] * 2  # fmt: skip


def test_print_logs_says_when_no_trainer_has_started(capfd: pytest.CaptureFixture[str]) -> None:
    cluster = FakeCluster([("Pending", [_pod("a", "t1", None)])])
    with pytest.raises(logs.ClientError, match="ml/search has no trainer pod that started"):
        logs.print_logs(cluster, "search", ["echo"], print)  # type: ignore[arg-type]
    group = _pod("g", "t3", "terminated", "search-g1-worker-0")
    cluster = FakeCluster([("Running", [group, _pod("a", "t1", "running")])])
    assert logs.print_logs(cluster, "search", ["echo"], print) == 0  # type: ignore[arg-type]
    out = capfd.readouterr().out.splitlines()
    assert out == [
        logs.header(_pod("a", "t1", "running")),
        "logs -n ml search-worker-0 -c trainer",
        logs.header(group),
        "logs -n ml search-g1-worker-0 -c trainer",
    ]
