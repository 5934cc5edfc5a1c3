"""The operator process: configuration, kopf handlers, runtime, health, metrics."""
