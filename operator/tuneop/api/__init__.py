"""The TuningJob API as the operator reads it: pure, no API calls, no other layer."""
