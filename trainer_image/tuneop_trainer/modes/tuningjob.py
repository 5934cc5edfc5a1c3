"""Spec mode (`python -m tuneop_trainer run --spec FILE`): a TuningJob's `hypermodel`,
`data` and `tuner` made into what a user's script is - the named keras-tuner tuner over
the HyperModel, and `tuner.search(...)` with the data and the spec's arguments - and run
by the same engine as script mode (modes/runner.py, engine/fit.py, patches/tuners.py):
every guarantee of exact resume lives there once.

What the spec adds to a plain search:
- the data (data/sources.py): arrays (in memory, memory-mapped, shards) trained in batches of
  `spec.tuner.batchSize`, shuffled each epoch; or a loader's tf.data datasets;
- `spec.tuner.earlyStopping` as Keras's `EarlyStopping`, `spec.tuner.tensorboard` as
  Keras's `TensorBoard` on the volume (`DIR/tensorboard/<trial>/execution<n>`, HParams
  by keras-tuner): their state is restored as any script's callbacks;
- a model that does not report the objective or the early-stopping monitor stops the
  search with exit 2 naming the field (keras-tuner would fail every trial);
- Hyperband promotions continue the previous round's optimizer state (slots and
  iteration count), not only its weights (Runtime.keep_optimizer);
- results.json names the best trial's weights digest, and `best_model.keras` is saved.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import sys
from pathlib import Path
from typing import Any

from tuneop_contract import TENSORBOARD_DIR, TUNER_DIR
from tuneop_contract.spec import JobSpec, SpecError

from .. import parallel
from ..checkpoint import fingerprint
from ..data import sources
from ..data.inputs import iterations
from ..data.sources import Dataset, import_ref
from ..engine.fit import InvalidSearch
from ..exits import summary
from .runner import Program, outcome, run_program

log = logging.getLogger(__name__)

NAME = "spec.hypermodel"  # what the engine's messages name as the program
PROJECT = "search"  # the keras-tuner project under DIR/tuner


def run(spec: JobSpec, checkpoint_dir: Path) -> int:
    """Run (or resume) the spec's search; returns the exit code."""
    for path in spec.python_path:
        if path not in sys.path:
            sys.path.insert(0, path)
    program = Program(
        name=NAME,
        execute=lambda rt: outcome(lambda: _search(spec, rt), NAME, summary),
        seed=spec.tuner.seed,
        export_model=True,
        keep_optimizer=True,
    )
    return run_program(
        program,
        checkpoint_dir,
        spec.checkpoint,
        spec.tuner.deterministic,
        spec.distribution.strategy,
    )


def _search(spec: JobSpec, rt: Any) -> None:
    import keras

    rt.reporter.update(force=True, objective=spec.tuner.objective, direction=spec.tuner.direction)
    if spec.tuner.dtype_policy:  # kept across clear_session by patches/dtype_policy.py
        keras.config.set_dtype_policy(spec.tuner.dtype_policy)
    dataset = sources.load(spec.data)
    # The loader's datasets are made before the search: their iteration counts are the
    # whole run's (tfdata.json), as for a script's top-level pipeline.
    iterations.boundary()
    _check_fingerprint(spec, dataset, rt.root, rt.write, parallel.current())
    hypermodel = _compiled_models(resolve_hypermodel(spec.hypermodel, dataset))
    tuner = _tuner(spec, hypermodel, rt.root)
    tuner.search(**_search_arguments(spec, dataset, rt))


def _check_fingerprint(spec: JobSpec, dataset: Any, root: Path, write: bool, role: Any) -> None:
    """A resume must see the same data, hypermodel and search as the first run. With
    parallel trials the oracle records it and the trial groups compare with it."""
    record = {
        "data": dataset.digest(),
        "hypermodel": spec.hypermodel,
        # as JSON has it (tuples are lists): what the record holds after a restart
        "tuner": json.loads(json.dumps(dataclasses.asdict(spec.tuner))),
    }
    fields = {"data": "spec.data", "hypermodel": "spec.hypermodel", "tuner": "spec.tuner"}
    wait = role.oracle_wait_seconds if role.is_group else 0.0
    fingerprint.check_or_record(root, record, fields, write and not role.is_group, wait)


def _tuner(spec: JobSpec, hypermodel: Any, root: Path) -> Any:
    """The spec's keras-tuner tuner, its project `DIR/tuner/search`."""
    import keras_tuner

    t = spec.tuner
    common: dict[str, Any] = {
        "hypermodel": hypermodel,
        "objective": keras_tuner.Objective(t.objective, direction=t.direction),
        "seed": t.seed,
        "directory": str(root / TUNER_DIR),
        "project_name": PROJECT,
        "overwrite": False,
        "executions_per_trial": t.executions_per_trial,
    }
    if t.algorithm == "Hyperband":
        return keras_tuner.Hyperband(
            max_epochs=t.max_epochs,
            factor=t.factor,
            hyperband_iterations=t.hyperband_iterations,
            **common,
        )
    cls = getattr(keras_tuner, t.algorithm)
    return cls(max_trials=t.max_trials, **common)


def _search_arguments(spec: JobSpec, dataset: Any, rt: Any) -> dict[str, Any]:
    """`tuner.search(...)`'s arguments: the data, the epochs and the callbacks."""
    import keras

    t = spec.tuner
    callbacks: list[Any] = [_reported_metrics(t.objective, t.early_stopping)]
    if t.early_stopping is not None:
        rule = t.early_stopping
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor=rule.monitor,
                patience=rule.patience,
                min_delta=rule.min_delta,
                mode=rule.mode,
            )
        )
    callbacks += [_callback(c, i) for i, c in enumerate(t.callbacks)]
    if t.tensorboard:  # keras-tuner gives each trial execution its own run under it
        callbacks.append(keras.callbacks.TensorBoard(log_dir=str(rt.root / TENSORBOARD_DIR)))
    arguments: dict[str, Any] = {"epochs": t.max_epochs, "verbose": 0, "callbacks": callbacks}
    if not isinstance(dataset, Dataset):  # the loader batched its tf.data datasets
        rt.known_digests[id(dataset.validation)] = (dataset.validation, dataset.digest())
        return {**arguments, "x": dataset.train, "validation_data": dataset.validation}
    if t.batch_size > len(dataset.x):
        raise SpecError(
            "spec.tuner.batchSize",
            f"{t.batch_size} is larger than the {len(dataset.x)} training samples",
        )
    # Fingerprints compare the data with the spec's digest of it (memory-mapped shards
    # are sampled, not read whole at every fit).
    rt.known_digests.update(
        {id(a): (a, dataset.digest()) for a in (dataset.x, dataset.y, dataset.x_val, dataset.y_val)}
    )
    return {
        **arguments,
        "x": dataset.x,
        "y": dataset.y,
        "validation_data": (dataset.x_val, dataset.y_val),
        "batch_size": t.batch_size,
        "shuffle": True,
    }


REFUSED_CALLBACKS = ("BackupAndRestore",)
"""Callbacks that resume training themselves: the trainer does (exactly, to the step)."""


def _callback(spec: Any, i: int) -> Any:
    """`spec.tuner.callbacks[i]` constructed; SpecError naming the field if it cannot be."""
    import keras

    field = f"spec.tuner.callbacks[{i}]"
    ref = spec.ref if ":" in spec.ref else ":".join(spec.ref.rsplit(".", 1))
    cls = import_ref(ref, f"{field}.class")
    if not (inspect.isclass(cls) and issubclass(cls, keras.callbacks.Callback)):
        raise SpecError(f"{field}.class", f"{spec.ref} is not a keras.callbacks.Callback class")
    if any(c.__name__ in REFUSED_CALLBACKS for c in cls.__mro__):
        raise SpecError(
            f"{field}.class",
            f"{spec.ref} restores training itself; the trainer resumes every trial at the "
            "exact step already (remove it)",
        )
    try:
        return cls(**spec.args)
    except Exception as exc:
        message = f"{cls.__name__}(**{spec.args}) raised {type(exc).__name__}: {exc}"
        raise SpecError(f"{field}.args", message) from exc


def _reported_metrics(objective: str, early_stopping: Any) -> Any:
    """A callback that stops the search (exit 2, naming the field) when the model does
    not report the objective or the early-stopping monitor: a spec error, not a failed
    trial (keras-tuner would fail every trial)."""
    import keras

    class _ReportedMetrics(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            logs = logs or {}
            reported = ", ".join(sorted(logs))
            if early_stopping is not None and early_stopping.monitor not in logs:
                raise InvalidSearch(
                    f'spec.tuner.earlyStopping.monitor: "{early_stopping.monitor}" is not '
                    f"produced by the model; it reports {reported}"
                )
            if objective not in logs:
                raise InvalidSearch(
                    f'spec.tuner.objective.name: "{objective}" is not produced by the '
                    f"model; it reports {reported}"
                )

    return _ReportedMetrics()


def _compiled_models(hypermodel: Any) -> Any:
    """`hypermodel` whose build(hp) must return a compiled keras.Model: the spec names
    no loss or optimizer of its own, so anything else stops the search (exit 2) instead
    of failing every trial."""
    import keras
    import keras_tuner

    build = hypermodel.build if isinstance(hypermodel, keras_tuner.HyperModel) else hypermodel

    def checked(hp: Any, *args: Any, **kwargs: Any) -> Any:
        model = build(hp, *args, **kwargs)
        if not isinstance(model, keras.Model):
            raise InvalidSearch(
                f"spec.hypermodel: build(hp) returned {type(model).__name__}, expected a "
                "compiled keras.Model"
            )
        if getattr(model, "optimizer", None) is None:
            raise InvalidSearch(
                "spec.hypermodel: build(hp) returned a model that is not compiled; call "
                "model.compile(optimizer=..., loss=..., metrics=...) inside build"
            )
        return model

    if isinstance(hypermodel, keras_tuner.HyperModel):
        hypermodel.build = checked
        return hypermodel
    return checked


def resolve_hypermodel(ref: str, dataset: Any) -> Any:
    """A "pkg.module:Name" reference → something keras-tuner accepts: a HyperModel instance or a
    build(hp) function. A HyperModel class is instantiated with input_shape/output_shape
    when its constructor takes them (the data's shapes), else without arguments."""
    import keras_tuner

    try:
        obj = import_ref(ref, "spec.hypermodel")
    except SpecError:
        raise
    except Exception as exc:  # the user's module raised at import time
        message = f"importing {ref} raised {type(exc).__name__}: {exc}"
        raise SpecError("spec.hypermodel", message) from exc
    if inspect.isclass(obj) and issubclass(obj, keras_tuner.HyperModel):
        params = inspect.signature(obj).parameters
        kwargs = {}
        if "input_shape" in params:
            kwargs["input_shape"] = dataset.input_shape
        if "output_shape" in params:
            kwargs["output_shape"] = dataset.output_shape
        try:
            return obj(**kwargs)
        except Exception as exc:
            raise SpecError("spec.hypermodel", f"{ref}(**{kwargs}) raised {exc}") from exc
    if isinstance(obj, keras_tuner.HyperModel) or (callable(obj) and not inspect.isclass(obj)):
        return obj
    raise SpecError(
        "spec.hypermodel",
        f"{ref} is a {type(obj).__name__}; expected a HyperModel subclass, a HyperModel "
        "instance or a build(hp) function",
    )
