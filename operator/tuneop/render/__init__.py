"""What the operator creates for a TuningJob, rendered as dicts from the api layer: pure."""
