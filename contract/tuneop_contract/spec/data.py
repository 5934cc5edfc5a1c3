"""`spec.data`: where a spec-mode search gets its training data (the trainer loads it)."""

from __future__ import annotations

import dataclasses

from .errors import SpecError
from .read import Doc, integer, mapping, quoted, string

SYNTHETIC_SAMPLES = 256
"""Samples of the synthetic data set (spec.data.synthetic.samples, and no spec.data)."""


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """One source: synthetic samples (the default), a file or directory, or a loader.
    Its fields are part of the search's fingerprint on the checkpoint volume: renaming
    one makes every existing volume's search look changed."""

    synthetic_samples: int | None = SYNTHETIC_SAMPLES
    synthetic_seed: int = 0
    path: str | None = None
    loader: str | None = None
    validation_split: float = 0.2


def parse_data(d: Doc) -> DataSpec:
    sources = [k for k in ("synthetic", "path", "loader") if d.get(k) is not None]
    if len(sources) > 1:
        raise SpecError("spec.data", f"set exactly one of synthetic, path, loader (got {sources})")
    split = d.get("validationSplit", DataSpec.validation_split)
    if isinstance(split, bool) or not isinstance(split, int | float) or not 0 <= split < 1:
        raise SpecError("spec.data.validationSplit", f"{quoted(split)} must be a number in [0, 1)")
    if sources == ["path"]:
        path = string(d, "path", "spec.data.path", "")
        return DataSpec(synthetic_samples=None, path=path, validation_split=float(split))
    if sources == ["loader"]:
        loader = string(d, "loader", "spec.data.loader", "")
        if ":" not in loader:
            raise SpecError(
                "spec.data.loader", f'{quoted(loader)} is not of the form "pkg.module:fn"'
            )
        return DataSpec(synthetic_samples=None, loader=loader, validation_split=float(split))
    syn = mapping(d, "synthetic", "spec.data.synthetic")
    return DataSpec(
        synthetic_samples=integer(
            syn, "samples", "spec.data.synthetic.samples", SYNTHETIC_SAMPLES, minimum=8
        ),
        synthetic_seed=integer(
            syn, "seed", "spec.data.synthetic.seed", DataSpec.synthetic_seed, minimum=0
        ),
        validation_split=float(split),
    )
