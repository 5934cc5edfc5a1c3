"""The exact-resume engine both modes run on (modes/tuningjob.py, modes/script.py).

A program (a user's script, or a TuningJob's search made into one) runs with, for this
process only (the changes to Keras and keras-tuner that route a program here are in
patches/):
- every keras-tuner tuner keeping its project under DIR (one per construction:
  projects.py), unless it trains with a loop of its own (loops.py);
- every `Model.fit` checkpointed and resumed at the exact step with its callbacks'
  state, in a trial or after the search (fit.py, callback_state.py, tensorboard.py),
  its input behind one interface with one module per kind (data/inputs/);
- one process runtime (runtime.py: the background writer, the cadence, the progress
  reporter).
"""
