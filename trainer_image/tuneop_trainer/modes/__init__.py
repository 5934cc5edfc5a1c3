"""The trainer's two front ends, each making a `engine.runner.Program` of what it runs:
`spec` (a TuningJob's hypermodel, data and tuner) and `script` (a user's keras-tuner
script). Neither imports the other; both run on the engine (`tuneop_trainer.engine`)."""
