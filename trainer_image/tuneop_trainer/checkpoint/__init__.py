"""Atomic, checksummed checkpoints of one fit, keeping the last K: the store (format and
atomic commit, store.py), the background writer (writer.py), Keras state <-> arrays
(state.py) and the volume failing (volume.py).

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

from .state import (
    REPLICA_SEP,
    CheckpointMismatch,
    Layout,
    model_state,
    restore_metrics,
    restore_state,
    weights_digest,
)
from .store import MANIFEST_FILE, META_FILE, PREFIX, STATE_FILE, CheckpointStore, replace_synced
from .volume import VOLUME_ERRNOS, VolumeError, volume_errors, volume_usage
from .writer import BackgroundWriter, SaveDone

__all__ = [
    "MANIFEST_FILE",
    "META_FILE",
    "PREFIX",
    "REPLICA_SEP",
    "STATE_FILE",
    "VOLUME_ERRNOS",
    "BackgroundWriter",
    "CheckpointMismatch",
    "CheckpointStore",
    "Layout",
    "SaveDone",
    "VolumeError",
    "model_state",
    "replace_synced",
    "restore_metrics",
    "restore_state",
    "volume_errors",
    "volume_usage",
    "weights_digest",
]
