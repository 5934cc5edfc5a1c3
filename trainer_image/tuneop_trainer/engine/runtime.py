"""What the patched keras-tuner and Keras code needs from the exec runner: one object
per process, installed before the user's script starts."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from tuneop_contract import TRIALS_DIR
from tuneop_contract.spec import Checkpoint

from .. import seeds
from ..checkpoint import BackgroundWriter, SaveDone
from ..checkpoint.cadence import Cadence, mtbf_from_env
from ..data.inputs import iterations
from ..report.progress import Reporter

FITS_DIR = "fits"  # fits outside any trial (e.g. the best model's final fit)


@dataclasses.dataclass(frozen=True)
class FitId:
    label: str  # for messages: "trial 0003 fit 0", "fit 0"
    dir: Path
    progress_id: str  # Progress.trial_id while it runs: the trial, or "fit-<n>"
    ordinal: int  # Progress.execution


@dataclasses.dataclass
class Runtime:
    root: Path
    checkpoint: Checkpoint
    strategy: Any
    reporter: Reporter
    write: bool = True  # False on non-chief workers
    script: str = ""  # the script's file name, for messages
    keep_optimizer: bool = False  # Hyperband promotions continue the optimizer state too
    tuners: list[Any] = dataclasses.field(default_factory=list)
    projects: Any = None  # projects.Projects: where each constructed tuner works
    trial_id: str | None = None  # the trial keras-tuner is running, if any
    trial_dir: Path | None = None  # DIR/trials/<tuner key>/<trial>
    trial_label: str = ""
    trial_fits: int = 0  # fits started in the current trial
    trial_builds: int = 0  # models built in the current trial
    outer_fits: int = 0  # fits started outside trials
    outer_builds: int = 0
    known_digests: dict[int, tuple[Any, str]] = dataclasses.field(default_factory=dict)
    """id(array) → (array, digest): arrays whose fingerprint the front end knows (spec
    mode's data, sampled when memory-mapped), not hashed again at every fit."""
    checkpoints: int = 0
    checkpoint_seconds: float = 0.0  # training-thread time spent on checkpoints
    train_seconds: float = 0.0  # time in fits (incl. validation and checkpoints)
    steps: int = 0
    writer: BackgroundWriter = dataclasses.field(init=False)
    cadence: Cadence = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.cadence = Cadence(self.checkpoint, mtbf_from_env())
        self.writer = BackgroundWriter(self.root, self._saved)
        self.reporter.update(**self.cadence.report())

    def _saved(self, done: SaveDone) -> None:
        self.cadence.written(done.cpu_seconds)
        self.reporter.saved(done, self.cadence.report())

    def flush_checkpoints(self) -> None:
        """Wait for the save in flight (SIGTERM, a fit's end)."""
        t0 = time.monotonic()
        try:
            self.writer.wait()
        finally:
            self.checkpoint_seconds += time.monotonic() - t0

    def begin_trial(self, tuner_key: str, trial_id: str) -> None:
        """Trial `trial_id` of the tuner whose key is `tuner_key` (projects.py)."""
        self.trial_id, self.trial_fits, self.trial_builds = str(trial_id), 0, 0
        self.trial_dir = self.trial_path(tuner_key, self.trial_id)
        # a search started before tuners had keys ("") keeps its labels (and fit seeds)
        self.trial_label = f"{tuner_key} trial {trial_id}".lstrip()
        iterations.boundary()

    def trial_path(self, tuner_key: str, trial_id: str) -> Path:
        """`DIR/trials/<tuner key>/<trial>`: two tuners' trials never share checkpoints."""
        return self.root / TRIALS_DIR / tuner_key / str(trial_id)

    def end_trial(self) -> None:
        self.trial_id = self.trial_dir = None
        iterations.boundary()

    def next_fit(self) -> FitId:
        """The fit that starts now: `trials/<tuner>/<id>/fit-<n>` inside a trial,
        `fits/fit-<n>` outside. Fits are numbered in call order, which a resumed process
        repeats."""
        if self.trial_id is not None and self.trial_dir is not None:
            n, self.trial_fits = self.trial_fits, self.trial_fits + 1
            label = f"{self.trial_label} fit {n}"
            return FitId(label, self.trial_dir / f"fit-{n}", self.trial_id, n)
        n, self.outer_fits = self.outer_fits, self.outer_fits + 1
        return FitId(f"fit {n}", self.root / FITS_DIR / f"fit-{n}", f"fit-{n}", n)

    def next_build_seed(self, base: int) -> int:
        """A seed for the model about to be built: a function of the search's seed,
        the trial and the build's ordinal, so a resumed process builds the same
        initial weights (and dropout seed state) as an uninterrupted one."""
        if self.trial_id is not None:
            n, self.trial_builds = self.trial_builds, self.trial_builds + 1
            text = f"{base}/trial/{self.trial_id}/{n}"
        else:
            n, self.outer_builds = self.outer_builds, self.outer_builds + 1
            text = f"{base}/outer/{n}"
        return seeds.derive(text)


_current: Runtime | None = None


def install(runtime: Runtime | None) -> None:
    global _current
    _current = runtime


def current() -> Runtime | None:
    return _current
