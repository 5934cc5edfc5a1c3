"""The trainer's two front ends, each making a `runner.Program` of what it runs:
`tuningjob` (a TuningJob's hypermodel, data and tuner) and `script` (a user's
keras-tuner script). Neither imports the other; both run through `runner` (the
process: strategy, runtime, patches, exit codes) on the engine (`tuneop_trainer.engine`)."""
