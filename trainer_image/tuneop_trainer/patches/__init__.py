"""Every change the trainer makes to Keras, keras-tuner and `tf.distribute`, installed in
one order (`PATCHES`) by `install`, once per process, before the program's first line.

Each module here holds one change and says why; `install` runs them in the order below.
The order matters where two changes wrap the same function, the later one outside:
- multiworker, then uneven, wrap `TensorFlowTrainer._maybe_symbolic_build` (uneven's
  wrapper runs first and calls multiworker's, with the first replica's batch under a
  MirroredStrategy);
- trial order, then the parallel oracle, replace `Oracle.reload` (the oracle's calls the
  one that restores creation order);
- tuners, then the parallel trial group, wrap `BaseTuner.search` and `on_trial_end`;
- dataset phases stamps the input constructors before fit routes `Model.fit` through the
  resumable fit that reads the stamps.
A condition says when an entry changes nothing: multiworker only under a
MultiWorkerMirroredStrategy, the parallel entries only in their role. The other changes
apply in every process and act only while a Runtime is installed (engine/runtime.py) or
on what the program constructs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from .. import parallel
from ..parallel import client, group, oracle
from . import (
    dataset_phases,
    dtype_policy,
    fit,
    gridsearch,
    keras_tuner_files,
    multiworker,
    strategies,
    tensorboard,
    tuners,
    uneven,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Context:
    """What the changes need to know about this process."""

    strategy: Any  # the trainer's tf.distribute strategy (strategy.create)
    write: bool  # this process writes keras-tuner's files (the chief)
    role: parallel.Role  # sequential, the oracle or a trial group (parallel trials)
    script: str  # the program's name in messages: a script's file, or "spec.hypermodel"
    on_oracle_change: Callable[[Any], None] | None = None  # the oracle role's progress


def _multiworker(ctx: Context) -> None:
    if multiworker.apply(ctx.strategy):
        log.info("Keras patched for MultiWorkerMirroredStrategy (%s)", multiworker.__name__)


def _atomic_json(ctx: Context) -> None:
    keras_tuner_files.install_atomic_json()
    keras_tuner_files.set_writer(ctx.write)


def _parallel_oracle(ctx: Context) -> None:
    if ctx.role.is_oracle:
        oracle.install(ctx.on_oracle_change)


def _parallel_group(ctx: Context) -> None:
    if ctx.role.is_group:  # never the oracle too
        client.install()
        group.install()


PATCHES: tuple[tuple[str, Callable[[Context], None]], ...] = (
    # MWMS only: Keras's fit skips a symbolic build and reduces scalar logs the way MWMS
    # can, and a lost peer ends the trial as a preemption (exit 75), not a FAILED trial.
    ("multiworker", _multiworker),
    # keras-tuner's JSON files are written atomically (a kill leaves no truncated file),
    # by the chief only.
    ("atomic json", _atomic_json),
    # A first batch that splits unevenly over MirroredStrategy's replicas builds the model
    # from replica 0's share instead of failing in Keras's cross-replica mean.
    ("uneven", lambda ctx: uneven.install()),
    # keras-tuner's clear_session before each build keeps the script's dtype policy.
    ("dtype policy", lambda ctx: dtype_policy.install()),
    # A reloaded oracle lists its trials in creation order, not the file system's, so
    # ties for the best trial break the same way after a resume.
    ("trial order", lambda ctx: keras_tuner_files.install_trial_order()),
    # GridSearch's walk of the grid is part of the oracle's saved state (it survives a
    # reload).
    ("gridsearch", lambda ctx: gridsearch.install()),
    # tf.data datasets and PyDatasets remember the script phase they were made in, so a
    # resume replays the iterations an uninterrupted process made on them.
    ("dataset phases", lambda ctx: dataset_phases.install()),
    # Model.fit runs as the engine's resumable fit (checkpointed, resumed at the step).
    ("fit", lambda ctx: fit.install()),
    # A script's TensorBoard callback logs to the checkpoint volume, each step once.
    ("tensorboard", lambda ctx: tensorboard.install()),
    # Every keras-tuner tuner: its project on the volume, saved at construction, built in
    # the strategy scope with a per-trial seed, trials placed and stopped on SIGTERM.
    ("tuners", lambda ctx: tuners.install()),
    # The oracle of parallel trials only: keras-tuner's Oracle hands a returning group its
    # trial, ends a trial once, knows the search is over after a restart (parallel/).
    ("parallel oracle", _parallel_oracle),
    # A trial group of parallel trials only: its OracleClient survives an oracle restart,
    # its workers meet after each trial, STOPPED ends the search in order (parallel/).
    ("parallel trial group", _parallel_group),
    # tf.distribute's strategy constructors return the trainer's one strategy (TF allows
    # one per process for collectives).
    ("strategies", lambda ctx: strategies.install(ctx.strategy, ctx.script)),
)
"""(name, installer) in the order they are installed."""


def install(ctx: Context) -> None:
    """Install every change in `PATCHES`' order (each is idempotent)."""
    for _, apply in PATCHES:
        apply(ctx)
