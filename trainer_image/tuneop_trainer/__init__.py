"""tuneop_trainer: preemption-safe Keras Tuner searches that resume exactly.

The floors, bottom up (tests/unit/test_trainer_layers.py enforces them; each imports only
the floors below it):
- the ground floor, the modules at the top: `spec` (the spec file, parsed by the
  contract's `tuneop_contract.spec` as the operator parses it), `exits`,
  `preemption`, `strategy` (the one tf.distribute strategy and what a multi-worker group
  is asked), `seeds`, `scope` (the scope guard), `failed_trials`;
- `checkpoint/` (store, state, writer, volume errors, cadence, format version,
  ownership, fingerprint, TensorBoard event-log sizes) and `parallel/` (the parallel
  trials' oracle, client and trial groups), each on the ground floor;
- `data/` (a spec's data sources and `inputs/`, a fit's input per kind) and `report/`
  (progress and results), above checkpoint and parallel;
- `engine/`: the resumable fit, the runtime, tuner projects, TensorBoard logs;
- `patches/`: every change to Keras, keras-tuner and tf.distribute, installed in one
  ordered list;
- `modes/`: the two front ends (a script, a TuningJob) and `runner`, the process both run;
- `cli` and `__main__` on top; `examples/` (sample HyperModels) apart.

Imports are at module level, except these, which are lazy on purpose:
- TensorFlow, Keras and keras-tuner wherever a module must load without them: the
  command line (`--help`, the spec and volume checks) runs before TensorFlow loads, and
  `strategy.create` must be the first TensorFlow op; so `strategy`, `seeds` and the modes
  import them inside the functions that need them, and the floors that hold no training
  code (ground, checkpoint, report) import them at module level nowhere.
- `cli` imports `modes.script` and `modes.tuningjob` when a command runs (both load
  TensorFlow through the runner).
- `parallel.local_oracle` imports keras-tuner's Oracle when called: the `parallel`
  package, which the command line reads for the process's role, loads no keras-tuner.
- `spec.keras_tuner_direction` imports keras-tuner only for an objective whose direction
  the contract's table of metric names does not know.
Inside the floors that train, a few TensorFlow imports sit in functions as they always
have; Keras loads TensorFlow there anyway.
"""
