"""The checkpoint store: one checkpoint directory per save, written into a temp
directory, fsynced, renamed and its parent fsynced; its manifest verified on load, a
corrupt newest checkpoint skipped for the one before."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import volume_format

log = logging.getLogger(__name__)

STATE_FILE = "state.npz"
META_FILE = "meta.json"
MANIFEST_FILE = "MANIFEST.json"
PREFIX = "ckpt-"


class CheckpointStore:
    """The checkpoints of one fit under `root`: the last `keep`, newest first on load."""

    def __init__(self, root: str | os.PathLike[str], keep: int = 2) -> None:
        self.root = Path(root)
        self.keep = max(1, keep)

    def _existing(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if p.name.startswith(PREFIX))

    def save(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
        """Write one checkpoint (blocking)."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self._tmp()
        try:
            with open(tmp / STATE_FILE, "wb") as handle:
                hashing = _HashingWriter(handle)
                np.savez(hashing, **arrays)  # type: ignore[arg-type]
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # give the space back (disk full)
            raise
        state = {"sha256": hashing.sha256.hexdigest(), "size": hashing.size}
        try:
            return self._commit(tmp, state, meta)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _tmp(self) -> Path:
        existing = self._existing()
        seq = int(existing[-1].name[len(PREFIX) :]) + 1 if existing else 0
        tmp = self.root / f".tmp-{PREFIX}{seq:08d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        return tmp

    def _commit(self, tmp: Path, state: dict[str, Any], meta: dict[str, Any]) -> Path:
        """meta + manifest into `tmp` (state.npz already there), then rename into
        place, fsync the parent, prune to `keep`."""
        stamped = {**meta, "savedAt": time.time(), volume_format.META_KEY: volume_format.FORMAT}
        meta_bytes = json.dumps(stamped, sort_keys=True).encode()
        manifest = {
            STATE_FILE: state,
            META_FILE: {"sha256": hashlib.sha256(meta_bytes).hexdigest(), "size": len(meta_bytes)},
        }
        try:
            _write_synced(tmp / META_FILE, meta_bytes)
            _write_synced(tmp / MANIFEST_FILE, json.dumps(manifest, sort_keys=True).encode())
            _fsync_dir(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        final = self.root / tmp.name.removeprefix(".tmp-").rsplit("-", 1)[0]
        os.replace(tmp, final)
        _fsync_dir(self.root)
        for old in self._existing()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        for stale in self.root.glob(f".tmp-{PREFIX}*"):  # left by a killed writer
            shutil.rmtree(stale, ignore_errors=True)
        return final

    def latest(self) -> tuple[dict[str, np.ndarray], dict[str, Any], Path] | None:
        """The newest checkpoint that verifies, falling back (with a warning) past
        corrupt ones; None if there is no usable checkpoint."""
        for path in reversed(self._existing()):
            try:
                arrays, meta = _verify_and_load(path)
            except (OSError, ValueError, KeyError) as exc:
                log.warning(
                    "checkpoint %s is corrupt (%s); falling back to the previous", path, exc
                )
                continue
            volume_format.check_meta(meta, path)
            return arrays, meta, path
        return None

    def remove(self, keep: int = 0) -> None:
        """Delete all but the newest `keep` checkpoints and any temp directory."""
        existing = self._existing()
        for path in [*existing[: len(existing) - keep], *self.root.glob(f".tmp-{PREFIX}*")]:
            shutil.rmtree(path, ignore_errors=True)


def _verify_and_load(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    manifest = json.loads((path / MANIFEST_FILE).read_bytes())
    for name in (STATE_FILE, META_FILE):
        size, sha256 = _file_digest(path / name)
        entry = manifest[name]
        if size != entry["size"] or sha256 != entry["sha256"]:
            raise ValueError(f"{name} does not match its sha256 in {MANIFEST_FILE}")
    with np.load(path / STATE_FILE) as npz:  # arrays read one at a time: no second copy
        arrays = {k: npz[k] for k in npz.files}
    return arrays, json.loads((path / META_FILE).read_bytes())


CHUNK = 8 * 1024 * 1024


def _file_digest(path: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


class _HashingWriter:
    """Passes writes through to `handle`, hashing them. It has no tell/seek, so zipfile
    (np.savez) streams the archive front to back (data descriptors, no rewrites) and the
    hash is that of the file."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.handle.write(view)
        self.sha256.update(view)
        self.size += len(view)
        return len(view)

    def flush(self) -> None:
        self.handle.flush()

    def read(self, *_args: Any) -> bytes:  # np.savez checks for the attribute only
        raise io.UnsupportedOperation("write-only")


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def replace_synced(tmp: Path, path: Path) -> None:
    """Move a written file into place durably: fsync it, rename, fsync the directory."""
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
