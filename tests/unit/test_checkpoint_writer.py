"""The checkpoint writer without TensorFlow: streamed format, background saves, pruning,
fallback past a torn checkpoint, and a full volume (a real size-limited tmpfs)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tuneop_trainer.checkpoint import BackgroundWriter, CheckpointStore, SaveDone, VolumeError


def arrays(value: float, n: int = 1000) -> dict[str, np.ndarray]:
    return {"model/w": np.full(n, value, np.float32), "optimizer/m": np.arange(n, dtype=np.int64)}


def test_background_save_reloads_what_it_was_given(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "fit-0", keep=2)
    done: list[SaveDone] = []
    writer = BackgroundWriter(tmp_path, done.append)
    history = {"loss": [1.0]}
    writer.submit(store, arrays(1.0), {"epoch": 1, "history": history})
    history["loss"].append(0.5)  # the caller goes on; the save keeps what it was given
    writer.wait()
    found = store.latest()
    assert found is not None
    state, meta, _path = found
    assert meta["history"] == {"loss": [1.0]} and state["model/w"][0] == 1.0
    assert len(done) == 1 and done[0].usage is not None and done[0].usage[0] > 0
    store.remove(keep=1)  # a finished fit keeps its final checkpoint
    assert store.latest() is not None
    store.remove()
    assert store.latest() is None


def test_one_save_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    release = threading.Event()
    inside = []
    original = CheckpointStore.save

    def slow_save(self: CheckpointStore, *args: object, **kwargs: object) -> Path:
        inside.append(1)
        release.wait(10)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(CheckpointStore, "save", slow_save)
    writer = BackgroundWriter()
    writer.submit(store, arrays(1.0), {"epoch": 1})
    assert writer.busy()
    second = threading.Thread(target=writer.submit, args=(store, arrays(2.0), {"epoch": 2}))
    second.start()
    second.join(0.3)
    assert second.is_alive() and len(inside) == 1  # waits for the first save
    release.set()
    second.join(10)
    writer.wait()
    found = store.latest()
    assert found is not None and found[1]["epoch"] == 2


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    store.save(arrays(1.0), {"value": 1})
    newest = store.save(arrays(2.0), {"value": 2})
    state = newest / "state.npz"
    state.write_bytes(state.read_bytes()[:-7])
    found = store.latest()
    assert found is not None and found[1]["value"] == 1


def test_full_volume_is_a_volume_error_and_keeps_the_previous(tmpfs: Any) -> None:
    with tmpfs("1m") as volume:
        _fill_and_check(volume)


def _fill_and_check(small_volume: Path) -> None:
    store = CheckpointStore(small_volume / "fit-0", keep=2)
    writer = BackgroundWriter(small_volume)
    writer.submit(store, arrays(1.0, 20_000), {"epoch": 1})  # ~240 KB: fits
    writer.wait()
    writer.submit(store, arrays(2.0, 200_000), {"epoch": 2})  # ~2.4 MB: does not
    with pytest.raises(VolumeError) as err:
        writer.wait()
    message = err.value.message
    assert "No space left on device (ENOSPC)" in message and "\n" not in message
    assert "MiB free of 1.0 MiB" in message
    found = store.latest()
    assert found is not None and found[1]["epoch"] == 1
    assert not list(store.root.glob(".tmp-*"))  # the failed save gave its space back
    writer.wait()  # the error was handed over once
