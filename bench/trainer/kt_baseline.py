"""Baseline for the benchmark: the same search with plain keras-tuner (overwrite=False,
restarted after each kill), optionally with Keras' BackupAndRestore callback.

Same spec, data, hypermodel and strategy as the tuneop trainer; keras-tuner builds the
model inside the strategy scope itself (distribution_strategy=...).
Usage: python kt_baseline.py --spec FILE --dir DIR [--backup]
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--backup", action="store_true", help="add keras BackupAndRestore")
    parser.add_argument("--steps-file", help="write the number of steps run here, every step")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)

    from tuneop_trainer import strategy as strategy_mod
    from tuneop_trainer.patches import multiworker
    from tuneop_trainer.spec import load_spec_file

    spec = load_spec_file(args.spec).job
    if spec.tuner.deterministic:
        os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
    strategy = strategy_mod.create(spec.distribution.strategy)
    multiworker.apply(strategy)  # as the trainer does: Keras's fit under MWMS
    import keras
    import keras_tuner
    import tensorflow as tf
    from tuneop_trainer.data import load
    from tuneop_trainer.modes.tuningjob import resolve_hypermodel

    if spec.tuner.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(spec.tuner.seed)
    data = load(spec.data)
    t = spec.tuner
    tuner = keras_tuner.RandomSearch(
        hypermodel=resolve_hypermodel(spec.hypermodel, data),
        objective=keras_tuner.Objective(t.objective, t.direction),
        max_trials=t.max_trials,
        seed=t.seed,
        executions_per_trial=t.executions_per_trial,
        distribution_strategy=strategy,
        directory=args.dir,
        project_name="search",
        overwrite=False,
    )
    steps = StepCounter(args.steps_file, keras)
    callbacks: list[Any] = [steps]
    if args.backup:
        backup = Path(args.dir) / "backup"
        callbacks.append(keras.callbacks.BackupAndRestore(str(backup)))
    tuner.search(
        data.x,
        data.y,
        epochs=t.max_epochs,
        batch_size=t.batch_size,
        validation_data=(data.x_val, data.y_val),
        callbacks=callbacks,
        verbose=0,
    )
    best = tuner.oracle.get_best_trials(1)[0]
    print(f"BEST {best.trial_id} {best.score}", flush=True)
    print(f"STEPS {steps.count}", flush=True)


def StepCounter(path: str | None, keras: Any) -> Any:
    """Counts training steps of this process (what the benchmark calls work done);
    keras-tuner deep-copies callbacks per trial, so the count lives in a shared list."""
    shared = [0]

    class _Counter(keras.callbacks.Callback):  # type: ignore[misc]
        @property
        def count(self) -> int:
            return shared[0]

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            shared[0] += 1
            if path:
                Path(path).write_text(str(shared[0]))

        def __deepcopy__(self, memo: Any) -> Any:
            return self

    return _Counter()


if __name__ == "__main__":
    main()
