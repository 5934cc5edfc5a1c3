"""tuneop: the TuningJob operator."""
