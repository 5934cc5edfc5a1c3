"""What the trainer tells the world: progress while it runs (progress.py: progress.json,
the ConfigMap the operator reads, Prometheus series) and the search's results at its end
(results.py: results.json, the best model, the termination message's summary)."""
