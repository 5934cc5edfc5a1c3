"""The exact-resume engine both modes run on (modes/spec.py, modes/script.py).

A program (a user's script, or a TuningJob's search made into one) runs with, for this
process only:
- every `tf.distribute` strategy it constructs being the trainer's (strategy_patches.py);
- every keras-tuner tuner keeping its project under DIR (one per construction:
  projects.py), saved at construction, building in the strategy scope with a per-trial
  seed kept apart from the program's own random streams (tuner_patches.py, seeds.py),
  unless it trains with a loop of its own (loops.py); its best epoch written atomically;
- every `Model.fit` checkpointed and resumed at the exact step with its callbacks'
  state, in a trial or after the search (fit.py, callback_state.py, tensorboard.py),
  its input behind one interface with one module per kind (inputs/);
- one process runtime (runtime.py: the background writer, the cadence, the progress
  reporter) and one way to end (runner.py: the contract's exit codes).
"""
