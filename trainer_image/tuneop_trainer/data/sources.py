"""Training data: the built-in synthetic EMG-like set, .npz/.npy files, or a loader.

Everything ends up as four arrays (x, y, x_val, y_val) indexed by sample, which the
engine trains like a script's arrays (data/inputs/arrays.py: each epoch's order a pure
function of the fit and the epoch, so the position in a checkpoint is (epoch, step)).
The synthetic set, a .npz and a loader's arrays are held in memory; a directory of
.npy files is opened memory-mapped (`npy.py`), so a set larger than memory trains
with the same batches.

A loader may instead return two batched `tf.data.Dataset`s, (train, validation), each
of (x, y) elements: `StreamData`. The trainer then iterates them as a Keras fit does
(data/inputs/stream.py), and the position in a checkpoint is the dataset's iteration state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from tuneop_contract.spec import DataSpec, SpecError

from ..checkpoint import fingerprint
from . import npy
from .shards import Sharded

# Synthetic EMG: windows of TIMESTEPS samples x CHANNELS electrodes, CLASSES gestures.
TIMESTEPS = 16
CHANNELS = 8
CLASSES = 4


@dataclasses.dataclass(frozen=True)
class Dataset:
    """The four arrays: numpy arrays, memory-mapped ones, or `Sharded` memory-mapped
    shards; `files` are the .npy files they are read from (none when held in memory)."""

    x: Any
    y: Any
    x_val: Any
    y_val: Any
    files: tuple[Path, ...] = ()

    @property
    def input_shape(self) -> list[int]:
        return [int(d) for d in self.x.shape[1:3]]

    @property
    def output_shape(self) -> list[int]:
        # y.max() reads all of y once: labels, 8 bytes a sample at most (one-hot y: no read)
        return [int(self.y.shape[-1])] if self.y.ndim > 1 else [int(self.y.max()) + 1]

    def digest(self) -> str:
        """What a resume compares with the first run's data (checkpoint/fingerprint.py): the arrays'
        bytes when in memory; the files' names, sizes and contents (sampled when large)
        with the four arrays' shapes and dtypes (the validation split) when mapped."""
        arrays = (self.x, self.y, self.x_val, self.y_val)
        if not self.files:
            return fingerprint.digest_arrays(*arrays)
        shapes = json.dumps([[list(a.shape), str(a.dtype)] for a in arrays])
        return fingerprint.digest_files(self.files, shapes)


@dataclasses.dataclass(frozen=True)
class StreamData:
    """A loader's (train, validation) `tf.data.Dataset`s, batched by the loader, each of
    (x, y) elements; the shapes come from the element spec, never from iterating (that
    would advance a reshuffling pipeline)."""

    train: Any
    validation: Any
    ref: str  # the loader, "pkg.module:fn"

    @property
    def input_shape(self) -> list[int]:
        x = self.train.element_spec[0]
        dims = getattr(x, "shape", None)
        if dims is None or dims.rank is None or None in dims.as_list()[1:]:
            raise SpecError(
                "spec.data.loader",
                f"{self.ref}(): the training dataset's x ({x}) has no fixed shape to pass "
                "to the HyperModel as input_shape; use a HyperModel without input_shape",
            )
        return [int(d) for d in dims.as_list()[1:]]

    @property
    def output_shape(self) -> list[int]:
        y = self.train.element_spec[1]
        dims = getattr(y, "shape", None)
        if dims is None or dims.rank is None or dims.rank < 2 or dims[-1] is None:
            # Sparse labels: the number of classes is in the data, not in its spec.
            raise SpecError(
                "spec.data.loader",
                f"{self.ref}(): the training dataset's y ({y}) does not say how many "
                "outputs the model has (sparse labels); use one-hot labels or a "
                "HyperModel without output_shape",
            )
        return [int(dims[-1])]

    def digest(self) -> str:
        """The loader and both element specs: the data itself is not read (its
        reshuffling would advance); a changed data set behind the same loader and
        shapes is not detected here."""
        text = json.dumps(
            [self.ref, str(self.train.element_spec), str(self.validation.element_spec)]
        )
        return hashlib.sha256(text.encode()).hexdigest()


def synthetic_emg(samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic EMG-like windows: each gesture activates a channel pattern with
    its own burst frequency, plus noise. x: (n, 16, 8, 1) float32, y: one-hot (n, 4)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=samples)
    t = np.arange(TIMESTEPS, dtype=np.float32)[:, None]
    patterns = np.random.default_rng(1234).uniform(0.2, 1.0, size=(CLASSES, CHANNELS))
    x = np.empty((samples, TIMESTEPS, CHANNELS), dtype=np.float32)
    for i, label in enumerate(labels):
        freq = 0.3 + 0.25 * label
        phase = rng.uniform(0, 2 * np.pi)
        burst = np.abs(np.sin(freq * t + phase)) * patterns[label][None, :]
        x[i] = burst + rng.normal(0, 0.3, size=(TIMESTEPS, CHANNELS))
    y = np.eye(CLASSES, dtype=np.float32)[labels]
    return x[..., None], y


def load(spec: DataSpec) -> Dataset | StreamData:
    """Load the data the spec names; SpecError (field `spec.data.*`) if it cannot."""
    val: tuple[Any, Any] | None = None
    files: tuple[Path, ...] = ()
    if spec.path:
        x, y, val, files = _load_path(spec.path)
    elif spec.loader:
        loaded = _load_loader(spec.loader)
        if isinstance(loaded, StreamData):
            return loaded
        x, y, val = loaded
    else:
        x, y = synthetic_emg(spec.synthetic_samples or 256, spec.synthetic_seed)
    x, y = _channel(_array(x)), _array(y)
    if len(x) != len(y):
        raise SpecError("spec.data", f"x has {len(x)} samples but y has {len(y)}")
    if val is None:
        n_val = round(len(x) * spec.validation_split)
        if n_val == 0:
            raise SpecError("spec.data.validationSplit", "leaves no validation samples")
        # The tail, like Keras' validation_split: deterministic, no shuffling; slices
        # are views (of a mapped file too): nothing is copied.
        val = (x[-n_val:], y[-n_val:])
        x, y = x[:-n_val], y[:-n_val]
    return Dataset(x, y, _channel(_array(val[0])), _array(val[1]), files)


def _array(value: Any) -> Any:
    """`value` as an array: no copy for an ndarray, a memmap (it stays mapped) or shards."""
    if isinstance(value, np.ndarray | Sharded):
        return value
    try:
        return np.asarray(value)
    except ValueError as exc:  # ragged lists
        raise SpecError("spec.data", f"x and y must be arrays: {exc}") from exc


def _channel(x: Any) -> Any:
    """(n, h, w) → (n, h, w, 1): the CNN wants a channel axis. A view, per shard too."""
    if x.ndim != 3:
        return x
    return Sharded([s[..., None] for s in x.shards]) if isinstance(x, Sharded) else x[..., None]


def _load_path(path: str) -> tuple[Any, Any, Any, tuple[Path, ...]]:
    p = Path(path)
    files: tuple[Path, ...] = ()
    if p.is_file() and p.suffix == ".npz":
        with np.load(p) as f:  # read whole: a .npz cannot be memory-mapped
            arrays = {k: f[k] for k in f.files}
    elif p.is_dir():
        arrays, files = npy.open_directory(p)
    elif p.exists():
        raise SpecError("spec.data.path", f'"{path}" is neither a .npz file nor a directory')
    else:
        raise SpecError("spec.data.path", f'"{path}" does not exist')
    if "x" not in arrays or "y" not in arrays:
        raise SpecError("spec.data.path", f'"{path}" must hold arrays x and y (x_val, y_val)')
    if ("x_val" in arrays) != ("y_val" in arrays):
        raise SpecError("spec.data.path", f'"{path}" must hold both x_val and y_val or neither')
    val = (arrays["x_val"], arrays["y_val"]) if "x_val" in arrays else None
    return arrays["x"], arrays["y"], val, files


_SHAPES = (
    "(x, y), (x, y, x_val, y_val) or ((x, y), (x_val, y_val)) of arrays, or "
    "(train, validation) tf.data.Datasets of (x, y) batches"
)


def _load_loader(ref: str) -> tuple[np.ndarray, np.ndarray, Any] | StreamData:
    fn = import_ref(ref, "spec.data.loader")
    try:
        out = fn()
    except Exception as exc:
        raise SpecError("spec.data.loader", f"{ref}() raised {type(exc).__name__}: {exc}") from exc
    shapes = _SHAPES
    if isinstance(out, list):
        out = tuple(out)
    if _is_dataset(out) or (isinstance(out, tuple) and any(_is_dataset(v) for v in out)):
        return _stream_data(ref, out)
    if not isinstance(out, tuple) or len(out) not in (2, 4):
        raise SpecError("spec.data.loader", f"{ref}() returned {_kind(out)}; expected {shapes}")
    pairs = len(out) == 2 and all(isinstance(p, tuple | list) and len(p) == 2 for p in out)
    if pairs:  # the keras.datasets convention: (x, y), (x_val, y_val)
        out = (*out[0], *out[1])
    for name, value in zip(("x", "y", "x_val", "y_val"), out, strict=False):
        if not hasattr(value, "__len__") or np.ndim(value) == 0:
            raise SpecError(
                "spec.data.loader", f"{ref}() returned {_kind(value)} as {name}; expected {shapes}"
            )
    return out[0], out[1], (out[2], out[3]) if len(out) == 4 else None


def _is_dataset(value: Any) -> bool:
    tf = sys.modules.get("tensorflow")  # a loader that made a dataset imported it
    return tf is not None and isinstance(value, tf.data.Dataset)


def _stream_data(ref: str, out: Any) -> StreamData:
    if not isinstance(out, tuple) or len(out) != 2 or not all(_is_dataset(v) for v in out):
        raise SpecError("spec.data.loader", f"{ref}() returned {_kind(out)}; expected {_SHAPES}")
    for name, dataset in zip(("training", "validation"), out, strict=True):
        spec = dataset.element_spec
        if not isinstance(spec, tuple) or len(spec) != 2:
            raise SpecError(
                "spec.data.loader",
                f"{ref}(): the {name} dataset's elements are {spec}; expected (x, y) batches",
            )
    return StreamData(out[0], out[1], ref)


def _kind(value: Any) -> str:
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def import_ref(ref: str, field: str) -> Any:
    """Import "pkg.module:Name"; SpecError naming `field` if that fails."""
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(field, f'cannot import "{module_name}": {exc}') from exc
    obj: Any = module
    for part in attr.split("."):  # "pkg.module:Class.attribute" is allowed too
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SpecError(field, f'module "{module_name}" has no attribute "{attr}"') from None
    return obj
