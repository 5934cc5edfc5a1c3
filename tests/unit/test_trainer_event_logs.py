"""event_logs.EventLogs without TensorFlow: what a checkpoint records and how a resume
rewinds to it (the files an interrupted process wrote after it cut or removed, this
process's own and other fits' files kept), and the record of a fit's first start."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tuneop_trainer.checkpoint import event_logs
from tuneop_trainer.checkpoint.event_logs import START_RECORD, EventLogs


class Writer:
    def __init__(self) -> None:
        self.flushed = 0

    def flush(self) -> None:
        self.flushed += 1


def _logs(root: Path, writer: Writer, write: bool = True) -> EventLogs:
    dirs = [str(root / "tb" / sub) for sub in ("", "train")]
    return EventLogs(root, root / "fit-0", dirs, lambda: [writer], write=write)


def _age(path: Path, seconds: float) -> None:
    """Make `path` look written `seconds` before this process started."""
    then = event_logs._started - seconds
    os.utime(path, (then, then))


def test_a_resume_rewinds_to_the_checkpoints_record(tmp_path: Path) -> None:
    (tmp_path / "tb" / "train").mkdir(parents=True)
    kept, train = tmp_path / "tb" / "hparams", tmp_path / "tb" / "train" / "events.1"
    kept.write_bytes(b"session")
    train.write_bytes(b"epoch0")
    writer = Writer()
    logs = _logs(tmp_path, writer)
    recorded = logs.sizes()
    assert writer.flushed == 1
    assert recorded == {"tb/hparams": 7, "tb/train/events.1": 6}  # keys relative to the volume
    # the interrupted process went on: appended, and started a file of its own
    train.write_bytes(b"epoch0epoch1")
    late = tmp_path / "tb" / "train" / "events.2"
    late.write_bytes(b"epoch2")
    for path in (kept, train, late):
        _age(path, 5)
    mine = tmp_path / "tb" / "train" / "events.3"  # this process's, newer than its start
    mine.write_bytes(b"new")
    os.utime(mine, (time.time() + 1, time.time() + 1))
    logs.rewind(json.loads(json.dumps(recorded)))
    assert train.read_bytes() == b"epoch0" and kept.read_bytes() == b"session"
    assert not late.exists() and mine.read_bytes() == b"new"


def test_no_record_or_a_reading_worker_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "tb").mkdir()
    f = tmp_path / "tb" / "events.1"
    f.write_bytes(b"abc")
    _age(f, 5)
    _logs(tmp_path, Writer()).rewind(None)  # a checkpoint from before records existed
    _logs(tmp_path, Writer(), write=False).rewind({})  # a non-chief worker
    assert f.read_bytes() == b"abc"


def test_a_fresh_start_after_an_interrupted_attempt_rewinds_to_its_first_start(
    tmp_path: Path,
) -> None:
    (tmp_path / "tb").mkdir()
    earlier = tmp_path / "tb" / "events.0"  # an earlier fit's, in the same log_dir
    earlier.write_bytes(b"fit0")
    _logs(tmp_path, Writer()).start()
    assert json.loads((tmp_path / "fit-0" / START_RECORD).read_text()) == {"tb/events.0": 4}
    attempt = tmp_path / "tb" / "events.1"  # the interrupted attempt's
    attempt.write_bytes(b"steps")
    for path in (earlier, attempt):
        _age(path, 5)
    _logs(tmp_path, Writer()).start()  # the next process: same fit, no checkpoint yet
    assert earlier.read_bytes() == b"fit0" and not attempt.exists()
