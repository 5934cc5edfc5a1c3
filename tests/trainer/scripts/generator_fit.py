# A plain fit over a Python generator (no tuner): script mode resumes it at the start
# of the interrupted epoch.
import time

import keras
import numpy as np


def batches():
    rng = np.random.default_rng(3)
    while True:
        time.sleep(0.02)  # a slow source: 3 s an epoch, several 2 s progress writes in each
        x = rng.normal(size=(8, 4)).astype("float32")
        yield x, (x[:, 0] > 0).astype("int32")


model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
model.fit(batches(), steps_per_epoch=150, epochs=3, verbose=0)
