"""A trial group waiting for its oracle's search record (checkpoint/fingerprint.py)
stops waiting on SIGTERM: Preempted (exit 75) at once, not after the wait's bound while
the kubelet's grace period runs out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tuneop_trainer import preemption
from tuneop_trainer.checkpoint.fingerprint import check_or_record


def test_a_sigterm_ends_the_wait_for_the_oracles_record(tmp_path: Path) -> None:
    preemption._requested.set()
    try:
        started = time.monotonic()
        with pytest.raises(preemption.Preempted):
            check_or_record(tmp_path, {"data": "x"}, {"data": "spec.data"}, False, wait=60)
        assert time.monotonic() - started < 5
    finally:
        preemption._requested.clear()


def test_without_a_sigterm_a_group_goes_on_without_a_record(tmp_path: Path) -> None:
    check_or_record(tmp_path, {"data": "x"}, {"data": "spec.data"}, False, wait=0.3)
    assert not list(tmp_path.iterdir())
