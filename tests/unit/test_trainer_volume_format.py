"""The checkpoint volume's format version (tuneop_trainer/checkpoint/volume_format.py)
without a trainer: who records it, what is refused and with which line, and that every checkpoint
carries it and is checked when loaded."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest
from tuneop_contract.spec import SpecError
from tuneop_trainer.checkpoint import META_FILE, CheckpointStore
from tuneop_trainer.checkpoint.volume_format import (
    FORMAT,
    FORMAT_FILE,
    META_KEY,
    FormatMismatch,
    check_meta,
    check_volume,
)


def test_the_writer_records_the_format_on_a_volume_without_one(tmp_path: Path) -> None:
    check_volume(tmp_path / "reader", write=False)
    assert not (tmp_path / "reader").exists()  # a reader writes nothing
    check_volume(tmp_path / "v", write=True)
    assert json.loads((tmp_path / "v" / FORMAT_FILE).read_text()) == {META_KEY: FORMAT}
    check_volume(tmp_path / "v", write=False)  # its own format: accepted


@pytest.mark.parametrize(
    ("content", "found", "advice"),
    [
        (json.dumps({META_KEY: FORMAT + 1}), str(FORMAT + 1), "the newer image that wrote it"),
        (json.dumps({META_KEY: 0}), "0", "an image of that version"),
        ("{not json", f"unknown (unreadable {FORMAT_FILE})", "an image of that version"),
        ("[1]", f"unknown (unreadable {FORMAT_FILE})", "an image of that version"),
    ],
)
def test_another_format_is_refused_naming_both_versions(
    tmp_path: Path, content: str, found: str, advice: str
) -> None:
    (tmp_path / FORMAT_FILE).write_text(content)
    with pytest.raises(SpecError) as refused:
        check_volume(tmp_path, write=True)
    assert str(refused.value) == (
        f"spec.checkpoint: the checkpoint volume is in checkpoint format version {found}, "
        f"this trainer image reads version {FORMAT}: run {advice}, or start afresh on a "
        "new claim"
    )
    assert (tmp_path / FORMAT_FILE).read_text() == content  # never overwritten


def test_every_checkpoint_carries_the_format_and_another_stops_the_load(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save({"model/w": np.zeros(3)}, {"epoch": 0, "step": 3})
    found = store.latest()
    assert found is not None and found[1][META_KEY] == FORMAT
    check_meta({"epoch": 0}, tmp_path)  # none recorded: format 1's layout
    with pytest.raises(FormatMismatch, match=f"format version {FORMAT + 1}, this trainer"):
        check_meta({META_KEY: FORMAT + 1}, tmp_path / "ckpt-00000000")
    assert not issubclass(
        FormatMismatch, Exception
    )  # keras-tuner must not take it as a failed trial
    assert json.loads((found[2] / META_FILE).read_text())[META_KEY] == FORMAT


def test_a_full_volume_is_a_retryable_volume_error_not_a_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuneop_trainer import cli
    from tuneop_trainer.checkpoint import VolumeError, volume_format
    from tuneop_trainer.spec import TrainerSpec

    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(volume_format, "write_atomic", full)
    with pytest.raises(VolumeError, match="No space left on device"):
        cli._check_volume(TrainerSpec(), tmp_path / "v")
