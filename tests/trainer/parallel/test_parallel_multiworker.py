"""Parallel trials with a MultiWorkerMirrored trial group: tuner0 is two worker
processes (TF_CONFIG on loopback, one tuner id), tuner1 a single process. Only the
group's chief reports to the oracle; both workers train the same trials; a barrier
after each trial end keeps the other worker from being handed the ended trial again.
One worker SIGKILLed mid-trial takes its group down (exit 75, the peer lost); the
recreated group is handed its own trial and resumes it from the chief's checkpoint."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import pytest
from parallel_helpers import ORACLE, Search, epoch_lines, mid_epoch_checkpoint
from trainer_helpers import results
from tuneop_contract import EXIT_COMPLETED, EXIT_PREEMPTED

pytestmark = pytest.mark.slow


def test_multiworker_group_beside_a_single_process_group(tmp_path: Path) -> None:
    search = Search(tmp_path)
    search.start_all(skip=("tuner0",))
    chief, other = search.start_multiworker("tuner0")

    def kill_point() -> str | None:
        progress = search.progress("tuner0")
        if progress and progress.trial_id and mid_epoch_checkpoint(search.ckpt, progress.trial_id):
            return progress.trial_id
        return None

    trial_id = search.wait_until(kill_point, what="the 2-worker group checkpointed mid-epoch")
    search.procs[other].kill()
    assert search.procs[chief].wait(timeout=120) == EXIT_PREEMPTED  # its peer is gone
    search.procs[other].wait()
    time.sleep(1.0)
    search.start_multiworker("tuner0")
    codes = search.wait()
    assert set(codes.values()) == {EXIT_COMPLETED}, codes

    restarted = search.text(chief).split("--- start 1")[1]
    found = re.search(rf"trial {trial_id} fit 0: restored \S+ at epoch (\d+) step (\d+)", restarted)
    assert found and (int(found[1]), int(found[2])) > (0, 0), restarted[-3000:]
    # both workers trained the same trials; no trial ran in both groups
    after = [epoch_lines(search.text(n).split("--- start 1")[1]) for n in (chief, other)]
    assert after[0] == after[1]
    single = {t for t, _, _ in epoch_lines(search.text("tuner1"))}
    group = {t for t, _, _ in epoch_lines(search.text(chief))}
    assert single and group and not single & group
    assert sorted(Counter(epoch_lines(search.text("tuner1"))).values()) == [1] * (2 * len(single))
    res = results(search.ckpt)
    assert sorted(t["trialId"] for t in res["trials"]) == [str(i) for i in range(6)]
    assert all(t["status"] == "COMPLETED" for t in res["trials"])
    state = search.oracle_state()
    assert sorted(state["end_order"]) == [str(i) for i in range(6)]
    assert set(state["run_times"].values()) == {1}
    assert search.progress(ORACLE).trials_completed == 6  # type: ignore[union-attr]
