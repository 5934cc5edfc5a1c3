"""Parallel trials in spec mode: an oracle process and two trial groups on loopback, one
shared checkpoint directory, as the operator's pods on one ReadWriteMany claim.

A trial's hyperparameters depend only on its id (the oracle's seeded sequence) and its
result only on (seed, trial, execution), so whichever group runs a trial, a disturbed
search must end with exactly the undisturbed one's trials, scores and best weights."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from typing import Any

import pytest
from parallel_helpers import ORACLE, Search, epoch_lines, mid_epoch_checkpoint
from trainer_helpers import comparable, results
from tuneop_contract import (
    BEST_MODEL_FILE,
    EXIT_COMPLETED,
    PHASE_COMPLETED,
    PROGRESS_FILE,
    TUNER_DIR,
)

pytestmark = pytest.mark.slow

GROUPS = ("tuner0", "tuner1")


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> Search:
    search = Search(tmp_path_factory.mktemp("undisturbed"))
    search.start_all()
    codes = search.wait()
    assert codes == dict.fromkeys(search.tuner_ids(), EXIT_COMPLETED), codes
    return search


def _check_once(search: Search) -> dict[str, Any]:
    """Every trial ran to its end once: 6 distinct COMPLETED trials in results.json, each
    ended once in the oracle (end_order, run_times), none left ongoing or queued."""
    res = results(search.ckpt)
    ids = [t["trialId"] for t in res["trials"]]
    assert len(ids) == 6 and len(set(ids)) == 6, ids
    assert all(t["status"] == "COMPLETED" for t in res["trials"]), res["trials"]
    state = search.oracle_state()
    assert sorted(state["end_order"]) == sorted(ids), state["end_order"]
    assert set(state["run_times"].values()) == {1}, state["run_times"]
    assert state["ongoing_trials"] == {} and state["retry_queue"] == []
    return res


def test_two_groups_run_every_trial_once(undisturbed: Search) -> None:
    search = undisturbed
    res = _check_once(search)
    # each (trial, execution, epoch) trained once, by one group; both groups worked
    per_group = {g: epoch_lines(search.text(g)) for g in GROUPS}
    trained = [line for lines in per_group.values() for line in lines]
    assert sorted(Counter(trained).values()) == [1] * 12, Counter(trained)
    trials_by = {g: {t for t, _, _ in lines} for g, lines in per_group.items()}
    assert trials_by["tuner0"] and trials_by["tuner1"], trials_by
    assert not trials_by["tuner0"] & trials_by["tuner1"]
    # results and the best model: tuner0 alone, after every trial ended
    assert (search.ckpt / BEST_MODEL_FILE).exists() and res["best"]["weightsSha256"]
    assert "search completed" in search.text("tuner0")
    assert "search completed" not in search.text("tuner1") + search.text(ORACLE)
    # one record, one tuner file per reporter; no sequential progress.json
    project = search.ckpt / TUNER_DIR / "search"
    for tuner_id in search.tuner_ids():
        progress = search.progress(tuner_id)
        assert progress is not None and progress.phase == PHASE_COMPLETED, tuner_id
        assert (project / f"{tuner_id}.json").exists()
    assert not (search.ckpt / PROGRESS_FILE).exists()
    oracle = search.progress(ORACLE)
    assert oracle is not None
    assert (oracle.trials_completed, oracle.trials_total) == (6, 6)
    assert oracle.best_trial_id == res["best"]["trialId"]
    assert oracle.best_score == res["best"]["score"]
    assert (project / "search_done.json").exists()


def test_group_killed_mid_trial_resumes_its_own_trial(tmp_path: Any, undisturbed: Search) -> None:
    search = Search(tmp_path)
    search.start_all()

    def kill_point() -> str | None:
        progress = search.progress("tuner1")
        if progress and progress.trial_id and mid_epoch_checkpoint(search.ckpt, progress.trial_id):
            return progress.trial_id
        return None

    trial_id = search.wait_until(kill_point, what="tuner1 checkpointed mid-epoch")
    search.procs["tuner1"].kill()
    search.procs["tuner1"].wait()
    time.sleep(1.0)
    search.start("tuner1")
    codes = search.wait()
    assert codes == dict.fromkeys(search.tuner_ids(), EXIT_COMPLETED), codes

    restarted = search.text("tuner1").split("--- start 1")[1]
    found = re.search(rf"trial {trial_id} fit 0: restored \S+ at epoch (\d+) step (\d+)", restarted)
    assert found, restarted[-3000:]
    assert (int(found[1]), int(found[2])) > (0, 0)
    # the other group was untouched and never ran the interrupted trial
    assert search.starts["tuner0"] == 1 and "restored" not in search.text("tuner0")
    assert trial_id not in {t for t, _, _ in epoch_lines(search.text("tuner0"))}
    res = _check_once(search)
    assert comparable(res) == comparable(results(undisturbed.ckpt))
    assert res["best"] == results(undisturbed.ckpt)["best"]


def _ended(search: Search) -> set[str]:
    try:
        return set(search.oracle_state()["end_order"])
    except (OSError, ValueError, KeyError):
        return set()


def _mid_trial(search: Search, group: str, ended: set[str]) -> bool:
    """`group` trains a trial not yet ended, past a committed mid-epoch checkpoint."""
    progress = search.progress(group)
    if not progress or progress.trial_id is None or progress.trial_id in ended:
        return False
    return mid_epoch_checkpoint(search.ckpt, progress.trial_id) > 0


def hold_both_mid_trial(search: Search) -> list[str]:
    """Once a trial is done, stop (SIGSTOP) each group as it is found mid-trial, until
    both are: their ends (and next requests) then fall in the oracle's absence. Without
    the hold, on a loaded machine one group runs ahead and both are seldom mid-trial at
    once. A group whose trial ended before its stop landed is let go and waited for
    again. Returns the held groups (the caller continues them)."""
    held: list[str] = []
    try:
        while True:
            ended = _ended(search)
            for group in [g for g in held if not _mid_trial(search, g, ended)]:
                search.procs[group].send_signal(signal.SIGCONT)
                held.remove(group)
            if len(held) == len(GROUPS):
                return held

            def next_group() -> str | None:
                ended = _ended(search)
                return next(
                    (g for g in GROUPS if g not in held and ended and _mid_trial(search, g, ended)),
                    None,
                )

            group = search.wait_until(next_group, what="a trial done, a group mid-trial")
            search.procs[group].send_signal(signal.SIGSTOP)
            held.append(group)
    except BaseException:
        for group in held:
            search.procs[group].send_signal(signal.SIGCONT)
        raise


def test_oracle_killed_mid_search_restarts_without_loss(tmp_path: Any, undisturbed: Search) -> None:
    search = Search(tmp_path)
    search.start_all()
    held = hold_both_mid_trial(search)
    search.procs[ORACLE].kill()
    search.procs[ORACLE].wait()
    for group in held:
        search.procs[group].send_signal(signal.SIGCONT)
    time.sleep(5.0)  # longer than a trial: the groups end theirs while it is away
    search.start(ORACLE)
    codes = search.wait()
    assert codes == dict.fromkeys(search.tuner_ids(), EXIT_COMPLETED), codes

    groups_log = search.text("tuner0") + search.text("tuner1")
    assert ": answered after" in groups_log  # a group's call waited for the oracle
    kept = re.findall(r"trial (\w+) stays with (tuner\d)", search.text(ORACLE))
    assert sorted(g for _, g in kept) == ["tuner0", "tuner1"], kept  # each kept its trial
    for trial_id, group in kept:  # ... and finished it, trained once, by that group
        assert trial_id in {t for t, _, _ in epoch_lines(search.text(group))}
    trained = epoch_lines(search.text("tuner0")) + epoch_lines(search.text("tuner1"))
    assert sorted(Counter(trained).values()) == [1] * 12, Counter(trained)
    res = _check_once(search)
    assert comparable(res) == comparable(results(undisturbed.ckpt))
    assert res["best"] == results(undisturbed.ckpt)["best"]
