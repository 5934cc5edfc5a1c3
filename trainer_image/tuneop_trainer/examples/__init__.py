"""Built-in example hypermodels."""
