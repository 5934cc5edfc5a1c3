"""tuneop_trainer: preemption-safe Keras Tuner searches that resume exactly."""
