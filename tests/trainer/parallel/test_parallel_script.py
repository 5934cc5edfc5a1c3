"""Parallel trials in script mode: the user's unmodified keras-tuner script (a search,
then best hyperparameters and a final fit) run by an oracle process and two trial
groups. Every trial runs once, in one group; the post-search code runs once, in
tuner0, with the same outcome as the same script run sequentially."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from parallel_helpers import ORACLE, Search
from trainer_helpers import SCRIPTS, comparable, fit_weights, results, start_exec
from tuneop_contract import EXIT_COMPLETED, TUNER_DIR

pytestmark = pytest.mark.slow

SCRIPT = SCRIPTS / "parallel_search.py"
FINAL = re.compile(r"final fit done: (\[.*\])")


def _settings(tmp: Path) -> dict[str, Any]:
    return {"checkpoint": {"intervalSteps": 3, "intervalSeconds": 0}}


def test_script_with_two_groups_runs_post_search_code_once_in_tuner0(tmp_path: Path) -> None:
    search = Search(tmp_path / "parallel", manifest=_settings(tmp_path), script=SCRIPT)
    search.start_all()
    codes = search.wait()
    assert codes == dict.fromkeys(search.tuner_ids(), EXIT_COMPLETED), codes

    # the final fit: tuner0 only, once
    assert len(FINAL.findall(search.text("tuner0"))) == 1
    assert not FINAL.findall(search.text("tuner1") + search.text(ORACLE))
    assert sorted(p.name for p in (search.ckpt / "fits").iterdir()) == ["fit-0"]
    # every trial ran its fit once, in one group
    fits = Counter(
        p.parent.name
        for p in (search.ckpt / "trials" / "untitled_project").glob("*/fit-0")
        if p.is_dir()
    )
    assert sorted(fits) == ["0", "1", "2", "3"] and set(fits.values()) == {1}
    state = json.loads((search.ckpt / TUNER_DIR / "untitled_project" / "oracle.json").read_text())
    assert state["run_times"] == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert sorted(state["end_order"]) == ["0", "1", "2", "3"]

    # the same script, sequentially: same trials, same final fit
    seq = tmp_path / "sequential"
    seq.mkdir()
    log = seq / "exec.log"
    proc = start_exec(SCRIPT, seq / "ckpt", log, devices=1)
    assert proc.wait(timeout=240) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert comparable(results(search.ckpt)) == comparable(results(seq / "ckpt"))
    assert FINAL.findall(search.text("tuner0")) == FINAL.findall(log.read_text())
    assert fit_weights(search.ckpt, "fits/fit-0") == fit_weights(seq / "ckpt", "fits/fit-0")
