"""Training data: where it comes from and how a fit reads it.

- sources.py: a TuningJob's `spec.data` (the synthetic set, .npz/.npy files, a loader)
  made into arrays or tf.data datasets; npy.py opens a directory of .npy files
  memory-mapped, shards.py reads sharded arrays as one.
- inputs/: a fit's training input, whatever the script or the spec passes to `fit`,
  behind one interface with one module per kind, each owning its position and replay.

`load` and `synthetic_emg` are here for scripts that train on the built-in set.
"""

from .sources import load, synthetic_emg

__all__ = ["load", "synthetic_emg"]
