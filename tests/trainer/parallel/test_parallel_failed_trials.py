"""A trial whose trial group ran out of memory, with parallel trials: the operator
recreates the group with TUNEOP_FAILED_TRIALS naming the trial (the running oracle pod
keeps its environment). The oracle hands the recreated group its ongoing trial; the
group ends it FAILED through the oracle without training it and asks for the next; no
other group ever runs it."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from parallel_helpers import ORACLE, Search, epoch_lines, mid_epoch_checkpoint
from trainer_helpers import results
from tuneop_contract import ENV_FAILED_TRIALS, EXIT_COMPLETED, format_failed_trials

pytestmark = pytest.mark.slow


def test_an_oom_killed_trial_is_ended_failed_not_retrained(tmp_path: Path) -> None:
    search = Search(tmp_path)
    search.start(ORACLE)
    search.start("tuner1")

    def mid_trial() -> str | None:
        progress = search.progress("tuner1")
        if progress and progress.trial_id and mid_epoch_checkpoint(search.ckpt, progress.trial_id):
            return progress.trial_id
        return None

    trial_id = search.wait_until(mid_trial, what="tuner1 mid-trial")
    search.procs["tuner1"].kill()  # as the kernel's OOM killer would
    search.procs["tuner1"].wait()
    time.sleep(0.5)
    failed = {ENV_FAILED_TRIALS: format_failed_trials({trial_id: "OOMKilled"})}
    search.start("tuner1", failed)
    search.start("tuner0", failed)
    codes = search.wait()
    assert codes == dict.fromkeys(search.tuner_ids(), EXIT_COMPLETED), codes

    restarted = search.text("tuner1").split("--- start 1")[1]
    assert re.search(rf"trial {trial_id}: out of memory .* ended FAILED, not trained", restarted)
    assert "restored" not in restarted
    trained = epoch_lines(restarted) + epoch_lines(search.text("tuner0"))
    assert trial_id not in {t for t, _, _ in trained}
    res = results(search.ckpt)
    status = {t["trialId"]: t["status"] for t in res["trials"]}
    assert status.pop(trial_id) == "FAILED"
    assert len(status) == 5 and set(status.values()) == {"COMPLETED"}, status
    assert res["best"]["trialId"] != trial_id
    state = search.oracle_state()
    assert sorted(state["end_order"]) == sorted(t["trialId"] for t in res["trials"])
    assert set(state["run_times"].values()) == {1}
