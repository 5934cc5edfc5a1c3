"""Atomic, checksummed checkpoints of one trial execution, keeping the last K.

Layout of one checkpoint directory `<root>/ckpt-<seq:08d>/`:
  state.npz      every model variable (incl. non-trainable and dropout seed-generator
                 state), every optimizer variable (slots, iteration count) and every
                 metric accumulator, as numpy arrays keyed `model/<path>`,
                 `optimizer/<path>`, `metrics/<path>` (restored by path, shapes checked);
                 in script mode also callback state (`callbacks/...`)
  meta.json      epoch, step within the epoch, history so far, times, the format
                 version (volume_format: another version is refused, exit 2), ...
  MANIFEST.json  sha256 and size of the two files above; written last

A checkpoint is written into a hidden temp directory, every file fsynced, then the
directory is renamed into place and the parent fsynced: a kill at any instant leaves
either no new checkpoint or a complete one. Loading verifies the manifest; a corrupt or
truncated latest checkpoint is skipped with a warning and the previous one is used.

`state.npz` is streamed into its file (np.savez into a non-seekable writer that hashes
as it writes): the host holds the state once, not again as a serialised buffer.
`BackgroundWriter` runs that write on a thread, one save in flight at a time, so the
training thread waits only for the device-to-host copy (`model_state`). A failing
write (disk full) surfaces as `VolumeError`, a BaseException like `Preempted`: keras-tuner
must not record the trial FAILED for it, and the trainer exits 75 to be retried.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import hashlib
import io
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
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
    """The checkpoints of one execution (or a trial's best-epoch state) under `root`."""

    def __init__(self, root: str | os.PathLike[str], keep: int = 2) -> None:
        self.root = Path(root)
        self.keep = max(1, keep)

    def _existing(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if p.name.startswith(PREFIX))

    def save(
        self,
        arrays: dict[str, np.ndarray],
        meta: dict[str, Any],
        also: tuple[tuple[CheckpointStore, dict[str, Any]], ...] = (),
    ) -> Path:
        """Write one checkpoint (blocking). `also`: other stores that get a checkpoint
        of the same state with their own meta (the trial's best epoch), sharing the
        state file by a hard link instead of writing it again. They are committed first:
        a kill in between leaves the best state without the checkpoint after it (the
        epoch is redone and finds its value already saved), never the reverse (a resumed
        run past a best epoch whose state was never kept)."""
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
            for store, other_meta in also:
                store.root.mkdir(parents=True, exist_ok=True)
                other = store._tmp()
                _link_or_copy(tmp / STATE_FILE, other / STATE_FILE)
                store._commit(other, state, other_meta)
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

    def latest_meta(self) -> dict[str, Any] | None:
        """The newest checkpoint's meta whose manifest, meta checksum and state size
        verify (without reading the state: the best store asks this every epoch)."""
        for path in reversed(self._existing()):
            try:
                manifest = json.loads((path / MANIFEST_FILE).read_bytes())
                data = (path / META_FILE).read_bytes()
                entry = manifest[META_FILE]
                if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                    raise ValueError(f"{META_FILE} does not match its sha256")
                if (path / STATE_FILE).stat().st_size != manifest[STATE_FILE]["size"]:
                    raise ValueError(f"{STATE_FILE} is truncated")
                meta: dict[str, Any] = json.loads(data)
            except (OSError, ValueError, KeyError) as exc:
                log.warning("checkpoint %s is corrupt (%s); trying the previous", path, exc)
                continue
            volume_format.check_meta(meta, path)
            return meta
        return None

    def remove(self, keep: int = 0) -> None:
        """Delete all but the newest `keep` checkpoints (0: an execution that finished,
        its record is done.json) and any temp directory."""
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


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno in VOLUME_ERRNOS:
            raise
        shutil.copyfile(source, target)  # a file system without hard links
        with open(target, "rb+") as handle:
            os.fsync(handle.fileno())


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


# --- the volume failing -------------------------------------------------------------

VOLUME_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})


class VolumeError(BaseException):
    """The checkpoint volume refused a write (full, over quota, read-only, I/O error):
    an infrastructure failure, not the trial's. A BaseException so that keras-tuner,
    which catches Exception around a trial, does not record the trial FAILED; the
    trainer exits 75 and the previous checkpoint stays the one to resume from."""

    def __init__(self, path: str | os.PathLike[str], exc: OSError) -> None:
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        # the system's words for the errno: libraries (h5py) put pages of detail in strerror
        reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
        self.message = (
            f"checkpoint volume error: {reason} ({code}) writing "
            f"{exc.filename or path}{_free_space(path)}; nothing was lost, the search "
            "resumes from its previous checkpoint once the volume has room"
        )
        super().__init__(self.message)


def _free_space(path: str | os.PathLike[str]) -> str:
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return ""
    free, size = st.f_bavail * st.f_frsize / MIB, st.f_blocks * st.f_frsize / MIB
    return f" ({free:.1f} MiB free of {size:.1f} MiB)"


MIB = 1024 * 1024


def volume_usage(path: Path) -> tuple[int, int, int] | None:
    """(bytes under `path`, free bytes on its file system, file system size) or None.
    Hard-linked files are counted once."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return None
    used, seen = 0, set()
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                info = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                used += info.st_blocks * 512
    return used, st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


@contextlib.contextmanager
def volume_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an OSError the volume raised (VOLUME_ERRNOS) into VolumeError."""
    try:
        yield
    except OSError as exc:
        if exc.errno in VOLUME_ERRNOS:
            raise VolumeError(path, exc) from exc
        raise


# --- saving in the background --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SaveDone:
    seconds: float  # wall time of the write, checksum, fsyncs and rename
    usage: tuple[int, int, int] | None  # volume_usage(root) right after it
    position: tuple[int, int] | None = None  # (epoch, step) saved, from meta
    cpu_seconds: float = 0.0  # the writer thread's CPU time for it (time.thread_time)


class BackgroundWriter:
    """Writes checkpoints on a thread, at most one in flight.

    `submit` takes state already copied to the host (`model_state`): it waits for the
    previous save, then hands the arrays to a new thread and returns. A save's error is
    raised by the next `submit` or `wait` (VolumeError for a volume error). `on_saved`
    is called on the writer thread once a save is durable, with what it took and the
    volume use under `root` after it."""

    def __init__(
        self, root: Path | None = None, on_saved: Callable[[SaveDone], None] | None = None
    ) -> None:
        self.root = root
        self.on_saved = on_saved
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(
        self,
        store: CheckpointStore,
        arrays: dict[str, np.ndarray],
        meta: dict[str, Any],
        also: tuple[tuple[CheckpointStore, dict[str, Any]], ...] = (),
    ) -> None:
        self.wait()
        meta = copy.deepcopy(meta)  # the caller goes on appending to its history
        self._thread = threading.Thread(
            target=self._run, args=(store, arrays, meta, also), name="checkpoint-writer"
        )
        self._thread.start()

    def _run(
        self,
        store: CheckpointStore,
        arrays: dict[str, np.ndarray],
        meta: dict[str, Any],
        also: tuple[tuple[CheckpointStore, dict[str, Any]], ...],
    ) -> None:
        t0, cpu0 = time.monotonic(), time.thread_time()
        try:
            with volume_errors(store.root):
                store.save(arrays, meta, also)
        except BaseException as exc:  # handed to the training thread
            self._error = exc
            return
        seconds, cpu = time.monotonic() - t0, time.thread_time() - cpu0
        if self.on_saved is not None:
            usage = None if self.root is None else volume_usage(self.root)
            position = (meta["epoch"], meta["step"]) if "step" in meta else None
            try:
                self.on_saved(SaveDone(seconds, usage, position, cpu))
            except Exception:  # reporting must not turn a durable save into a failure
                log.exception("reporting a checkpoint failed")

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        """Block until no save is in flight; raise the last save's error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error


# --- Keras model state <-> arrays ---------------------------------------------------


REPLICA_SEP = "@replica"


class CheckpointMismatch(ValueError):
    """A checkpoint does not fit the model it is restored into (the model changed)."""


def model_state(model: Any) -> dict[str, np.ndarray]:
    """Every variable that affects training from here on, as numpy arrays keyed
    `<group>/<variable path>` (see `_keys`)."""
    arrays: dict[str, np.ndarray] = {}
    local = _multiworker(model)
    for group, variables in _groups(model).items():
        for key, var in zip(_keys(group, variables), variables, strict=True):
            components = _local_components(var)
            value = components[0].numpy() if local else var.numpy()
            arrays[key] = np.asarray(value)
            if group == "metrics" and not local and len(components) > 1:
                # Each replica's share of a SUM accumulator: restoring the shares (not
                # the total split evenly) keeps the epoch's train metrics bit-exact.
                for i, component in enumerate(components):
                    arrays[f"{key}{REPLICA_SEP}{i}"] = np.asarray(component.numpy())
    return arrays


def restore_state(model: Any, arrays: dict[str, np.ndarray], groups: tuple[str, ...]) -> None:
    """Assign saved arrays to the model's variables (call inside strategy.scope()).

    Variables are matched by path and their shapes checked. When the paths differ but
    the count and every shape agree in order (Keras numbers auto-named layers per
    session: `dense_3` in one process is `dense` in another), they are matched in
    order. Anything else raises `CheckpointMismatch` naming the variable."""
    current = _groups(model)
    for group in groups:
        variables = current[group]
        keys = _keys(group, variables)
        saved = [k for k in arrays if k.startswith(group + "/") and REPLICA_SEP not in k]
        if set(keys) != set(saved):
            by_order = sorted(saved, key=_saved_order(saved))
            shapes_agree = len(by_order) == len(variables) and all(
                tuple(arrays[k].shape) == tuple(v.shape)
                for k, v in zip(by_order, variables, strict=True)
            )
            if not shapes_agree:
                missing = sorted(set(keys) - set(saved)) or sorted(set(saved) - set(keys))
                raise CheckpointMismatch(
                    f"checkpoint has {len(saved)} {group} variables, the model has "
                    f"{len(variables)}; first difference: {missing[0]}"
                )
            log.info("restoring %s variables in order (their paths differ)", group)
            keys = by_order
        local = group == "metrics" and _multiworker(model)
        for var, key in zip(variables, keys, strict=True):
            value = arrays[key]
            if tuple(value.shape) != tuple(var.shape):
                raise CheckpointMismatch(
                    f"variable {key} has shape {tuple(var.shape)} in the model and "
                    f"{tuple(value.shape)} in the checkpoint"
                )
            components = _local_components(var)
            shares = [arrays.get(f"{key}{REPLICA_SEP}{i}") for i in range(len(components))]
            if local:
                for component in components:
                    component.assign(value)
            elif (
                group == "metrics"
                and len(components) > 1
                and all(share is not None for share in shares)
            ):
                for component, share in zip(components, shares, strict=True):
                    component.assign(share)
            else:
                var.assign(value)


def _keys(group: str, variables: list[Any]) -> list[str]:
    """`<group>/<path>`, with `#n` appended to the n-th repeat of a path."""
    seen: dict[str, int] = {}
    keys = []
    for i, var in enumerate(variables):
        path = str(getattr(var, "path", None) or getattr(var, "name", None) or i)
        n = seen.get(path, 0)
        seen[path] = n + 1
        keys.append(f"{group}/{path}" + (f"#{n}" if n else ""))
    return keys


def _saved_order(saved: list[str]) -> Any:
    """Saved keys in the order they were written (np.savez keeps insertion order;
    older checkpoints used `<group>/<index>`)."""
    position = {k: i for i, k in enumerate(saved)}

    def order(key: str) -> tuple[int, int]:
        tail = key.split("/", 1)[1]
        return (int(tail), 0) if tail.isdigit() else (position[key], 1)

    return order


def restore_metrics(model: Any, arrays: dict[str, np.ndarray]) -> None:
    restore_state(model, arrays, ("metrics",))


def _multiworker(model: Any) -> bool:
    """Under MultiWorkerMirroredStrategy, reading a metric accumulator (a SUM
    SyncOnReadVariable) in cross-replica context is a cross-worker all-reduce, which
    would block a chief that checkpoints alone. There the state is read from (and
    metric accumulators restored into) this worker's local copies: model and optimizer
    variables are mirrored (the local copy is the value); metric accumulators are the
    chief's own share of the epoch so far (see docs/design/trainer.md, "Multi-worker")."""
    from .multiworker import is_multiworker

    return is_multiworker(model.distribute_strategy)


def _local_components(var: Any) -> list[Any]:
    tf_var = getattr(var, "value", var)  # Keras 3 Variable wraps a tf.Variable
    values = getattr(tf_var, "values", None)
    return list(values) if values is not None else [tf_var]


def _groups(model: Any) -> dict[str, list[Any]]:
    opt = model.optimizer
    return {
        "model": list(model.variables),
        "optimizer": list(opt.variables),
        "metrics": list(model.metrics_variables),
    }


def weights_digest(model: Any) -> str:
    """sha256 over the model's weights: how tests compare results bit for bit."""
    digest = hashlib.sha256()
    for var in model.weights:
        digest.update(np.ascontiguousarray(var.numpy()).tobytes())
    return digest.hexdigest()
