"""How the parallel roles end when they cannot go on: the oracle on SIGTERM, a trial
group whose oracle never answers (its bound), and a trial group SIGTERMed while it
waits for the oracle: exit 75 every time (preempted: recreate me, nothing is lost)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from parallel_helpers import ORACLE, Search
from tuneop_contract import EXIT_PREEMPTED

pytestmark = pytest.mark.slow


def test_oracle_exits_75_on_sigterm(tmp_path: Path) -> None:
    search = Search(tmp_path)
    proc = search.start(ORACLE)
    try:
        search.wait_until(lambda: "oracle serving" in search.text(ORACLE), what="serving")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == EXIT_PREEMPTED
        assert time.monotonic() - t0 < 5
    finally:
        search.kill_all()
    assert "stop serving" in search.text(ORACLE)


def test_group_exits_75_when_the_oracle_stays_away(tmp_path: Path) -> None:
    search = Search(tmp_path, extra_env={"TUNEOP_ORACLE_WAIT_SECONDS": "3"})
    proc = search.start("tuner1")
    try:
        assert proc.wait(timeout=120) == EXIT_PREEMPTED
    finally:
        search.kill_all()
    assert "unreachable for 3s" in search.text("tuner1")


def test_group_waiting_for_the_oracle_exits_75_on_sigterm(tmp_path: Path) -> None:
    search = Search(tmp_path)
    search.start(ORACLE)
    search.wait_until(lambda: "oracle serving" in search.text(ORACLE), what="serving")
    search.procs[ORACLE].kill()  # away for good: the group will wait in its client
    search.procs[ORACLE].wait()
    proc = search.start("tuner1")
    try:
        time.sleep(8.0)  # started, asking the oracle
        assert proc.poll() is None
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == EXIT_PREEMPTED
        assert time.monotonic() - t0 < 12  # within one client attempt
    finally:
        search.kill_all()
