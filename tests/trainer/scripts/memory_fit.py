# A large numpy training set (MEMORY_MB, default 320 MB) and a one-layer model: the
# resident memory at every epoch end is written to MEMORY_OUT, with the memory before
# the fit, so a caller can see whether the trainer copies the set per epoch.
import json
import os
import sys

import keras
import numpy as np


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


features = 256
samples = int(float(os.environ.get("MEMORY_MB", "320")) * 2**20) // (features * 4)
x = np.random.default_rng(0).standard_normal((samples, features), dtype=np.float32)
y = (x[:, 0] > 0).astype("float32")
out = {"dataMB": x.nbytes / 2**20, "epochsMB": []}


class Memory(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        out["epochsMB"].append(rss_mb())


model = keras.Sequential([keras.Input((features,)), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="sgd", loss="binary_crossentropy")
model.fit(x[:64], y[:64], epochs=1, batch_size=64, verbose=0)  # warm-up: TF's own memory
out["beforeMB"] = rss_mb()
epochs = int(os.environ.get("MEMORY_EPOCHS", "5"))
model.fit(x, y, epochs=epochs, batch_size=8192, shuffle=True, verbose=0, callbacks=[Memory()])
with open(os.environ["MEMORY_OUT"], "w") as f:
    json.dump(out, f)
sys.exit(0)
