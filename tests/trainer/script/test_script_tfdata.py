"""A tf.data input (shuffle with reshuffle_each_iteration, map, batch, prefetch) is
iterated by the trainer, so a resumed fit sees the same batches in the same order as an
uninterrupted one: killed mid-epoch in two trials, the search ends bit-identical."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_helpers import SCRIPTS, assert_killed_search_matches

SCRIPT = SCRIPTS / "tfdata_search.py"

pytestmark = [pytest.mark.slow, pytest.mark.devices(2)]


def test_tfdata_resumes_exactly(tmp_path: Path) -> None:
    assert_killed_search_matches(SCRIPT, tmp_path, (("0", 1), ("1", 2)), min_step=3)
