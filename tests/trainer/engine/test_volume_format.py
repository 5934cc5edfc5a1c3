"""The checkpoint volume says its format version (tuneop_trainer/checkpoint/volume_format.py): an
image resumes only the format it writes and refuses another with one line (exit 2),
before it reads or writes anything; a checkpoint of another format met later stops the
trainer the same way, never as a failed trial; and a volume written before the version
was recorded (format 1's layout) resumes exactly in script mode; spec mode, whose layout
format 2 changed, refuses a format-1 volume."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer_helpers import (
    SCRIPTS,
    comparable,
    fit_weights,
    kill_exec_when,
    results,
    start,
    start_exec,
    tiny_spec,
    trial_fit,
    write_spec,
)
from tuneop_contract import EXIT_COMPLETED, EXIT_INVALID_SPEC
from tuneop_trainer.checkpoint import MANIFEST_FILE, META_FILE
from tuneop_trainer.checkpoint.volume_format import FORMAT, FORMAT_FILE, META_KEY

from tests.checkpoints import committed

SCRIPT = SCRIPTS / "small_search.py"


def test_a_volume_of_another_format_is_refused_before_anything_runs(tmp_path: Path) -> None:
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    ckpt.mkdir()
    (ckpt / FORMAT_FILE).write_text(json.dumps({META_KEY: FORMAT + 1}))
    assert start_exec(SCRIPT, ckpt, log).wait(timeout=120) == EXIT_INVALID_SPEC
    text = log.read_text()
    assert (
        f"error: spec.checkpoint: the checkpoint volume is in checkpoint format version "
        f"{FORMAT + 1}, this trainer image reads version {FORMAT}: run the newer image that "
        "wrote it, or start afresh on a new claim"
    ) in text
    assert "Traceback" not in text
    assert os.listdir(ckpt) == [FORMAT_FILE]  # nothing else read or written


def _rewrite_metas(root: Path, change: Callable[[dict[str, Any]], None]) -> int:
    """Change every checkpoint's meta.json under `root`, its manifest entry to match."""
    metas = sorted(root.rglob(f"ckpt-*/{META_FILE}"))
    for path in metas:
        meta = json.loads(path.read_text())
        change(meta)
        data = json.dumps(meta, sort_keys=True).encode()
        path.write_bytes(data)
        manifest_path = path.parent / MANIFEST_FILE
        manifest = json.loads(manifest_path.read_text())
        manifest[META_FILE] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        manifest_path.write_text(json.dumps(manifest, sort_keys=True))
    return len(metas)


def test_an_unversioned_volume_resumes_exactly_and_another_checkpoint_format_stops_it(
    tmp_path: Path,
) -> None:
    ref, log = tmp_path / "ref", tmp_path / "ref.log"
    assert start_exec(SCRIPT, ref, log).wait(timeout=300) == EXIT_COMPLETED, log.read_text()
    assert json.loads((ref / FORMAT_FILE).read_text()) == {META_KEY: FORMAT}
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    # once trial 1 has a checkpoint committed: the resumes below read (and restore) it
    killed = kill_exec_when(
        SCRIPT,
        ckpt,
        log,
        lambda p: p.trial_id == "1" and p.step >= 4 and committed(ckpt / trial_fit("1")),
    )
    assert killed == -signal.SIGKILL
    # as a trainer from before the format was recorded left it
    (ckpt / FORMAT_FILE).unlink()
    assert _rewrite_metas(ckpt, lambda meta: meta.pop(META_KEY)) > 0

    _rewrite_metas(ckpt, lambda meta: meta.update({META_KEY: FORMAT + 1}))
    assert start_exec(SCRIPT, ckpt, log).wait(timeout=300) == EXIT_INVALID_SPEC
    text = log.read_text()
    assert f"is in checkpoint format version {FORMAT + 1}, this trainer image reads" in text
    assert "Traceback" not in text and "FAILED" not in text

    _rewrite_metas(ckpt, lambda meta: meta.pop(META_KEY))
    (ckpt / FORMAT_FILE).unlink()  # the refused run recorded it: unversioned again
    assert start_exec(SCRIPT, ckpt, log).wait(timeout=300) == EXIT_COMPLETED, log.read_text()
    assert "trial 1 fit 0: restored" in log.read_text()
    assert comparable(results(ckpt)) == comparable(results(ref))
    assert fit_weights(ckpt, trial_fit("1")) == fit_weights(ref, trial_fit("1"))
    # recorded as what it is: format 1's layout, which script mode reads (and an image
    # of format 1 still does, up to a checkpoint written since, which says 2)
    assert json.loads((ckpt / FORMAT_FILE).read_text()) == {META_KEY: 1}


def test_spec_mode_refuses_a_volume_of_format_1(tmp_path: Path) -> None:
    """Format 2 moved spec mode onto script mode's engine and layout: a spec-mode volume
    of format 1, recorded or from before formats were recorded, is refused."""
    spec = write_spec(tmp_path, tiny_spec())
    for recorded in (True, False):
        ckpt, log = tmp_path / f"ckpt-{recorded}", tmp_path / f"log-{recorded}"
        (ckpt / "trials" / "0000" / "exec-0").mkdir(parents=True)
        if recorded:
            (ckpt / FORMAT_FILE).write_text(json.dumps({META_KEY: 1}))
        assert start(spec, ckpt, log).wait(timeout=120) == EXIT_INVALID_SPEC
        text = log.read_text()
        assert (
            "error: spec.checkpoint: the checkpoint volume is in checkpoint format version 1, "
            f"this trainer image reads version {FORMAT}: run an image of that version, or "
            "start afresh on a new claim"
        ) in text
        assert "Traceback" not in text
        assert not (ckpt / "tuner").exists()
