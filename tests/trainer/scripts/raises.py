import keras_tuner  # noqa: F401

values = [1, 2, 3]
total = sum(values) / (len(values) - 3)
