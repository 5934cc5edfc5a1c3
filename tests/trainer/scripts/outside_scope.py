# build(hp) returns a model created at import time, outside any strategy scope.
import keras
import keras_tuner
import numpy as np

MODEL = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
MODEL.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])


def build(hp):
    hp.Int("unused", 1, 2)
    return MODEL


x = np.zeros((16, 4), "float32")
y = np.zeros((16,), "int32")
tuner = keras_tuner.RandomSearch(build, objective="val_accuracy", max_trials=1)
tuner.search(x, y, validation_data=(x, y), epochs=1)
