# Trains on data.npy from the working directory (a test changes it between runs).
import keras
import keras_tuner
import numpy as np

x = np.load("data.npy")
y = (x[:, 0] > 0).astype("int32")


def build(hp):
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(hp.Int("u", 2, 4), activation="relu"),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


tuner = keras_tuner.RandomSearch(build, objective="val_accuracy", max_trials=2, seed=1)
tuner.search(x, y, validation_split=0.2, epochs=20, batch_size=4, verbose=0)
