"""Script mode: a user's own keras-tuner script, unchanged, made preemption-safe.

`python -m tuneop_trainer exec [--dir DIR] SCRIPT.py [ARGS...]` runs the script as
`__main__` after changing, for this process only:
- every `tf.distribute` strategy the script constructs is the trainer's (strategy_patches.py);
- every keras-tuner tuner keeps its project under DIR (one per construction:
  projects.py), is saved at construction, builds in the strategy scope with a per-trial
  seed kept apart from the script's own random streams (tuner_patches.py, seeds.py), unless it
  trains with a loop of the script's own (loops.py);
- every `Model.fit` is checkpointed and resumed at the exact step with its callbacks'
  state, in a trial or after the search (fit.py, callback_state.py);
- what a search depends on is fingerprinted, so a resume against a changed script or
  data stops with a one-line error (fingerprint.py).
runner.py runs the script and turns its outcome into the contract's exit codes.
"""
