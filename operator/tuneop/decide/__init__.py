"""One reconcile pass's decision (`decide.reconcile.decide`), from what was read: pure."""
