"""A keras-tuner script as a user writes it: its model in a module beside it
(model_lib.py), a package of its own (requirements.txt), its own argument, a file it
saves where it runs."""

import argparse
import json

import keras_tuner
import numpy as np
from model_lib import build
from tuneop_e2e_extra import describe

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x[:, 0] + x[:, 1] > 0).astype("int64")

tuner = keras_tuner.RandomSearch(
    build, objective="val_accuracy", max_trials=2, directory="kt", project_name="client"
)
tuner.search(x, y, epochs=args.epochs, validation_split=0.25, batch_size=32)
best = tuner.get_best_hyperparameters(1)[0].values
with open("best_hyperparameters.json", "w") as handle:
    json.dump(best, handle)
print("best hyperparameters:", best)
print(describe(best))
