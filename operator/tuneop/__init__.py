"""tuneop: the Kubernetes operator for TuningJob (tuneop.io/v1alpha1)."""

__version__ = "0.1.0"
