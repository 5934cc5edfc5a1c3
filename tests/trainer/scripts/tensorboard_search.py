# A keras-tuner search that logs to TensorBoard as the keras.io guide "Visualize the
# hyperparameter tuning process" does (a TensorBoard callback given to `search`; keras-tuner
# writes each trial to <log_dir>/<trial>/execution0 with its HParams), here with
# batch-level summaries every 2 batches and weight histograms; then the best model's
# final fit logging to a directory of its own.
import os

import keras
import keras_tuner
import numpy as np

rng = np.random.default_rng(3)
labels = rng.integers(0, 2, size=160)
x = rng.normal(size=(160, 4)).astype("float32") + labels[:, None]
y = labels.astype("int32")


def build(hp):
    model = keras.Sequential(
        [
            keras.Input(shape=(4,)),
            keras.layers.Dense(hp.Int("units", 4, 16, step=4), activation="relu"),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(hp.Float("lr", 1e-3, 1e-2, sampling="log")),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


tuner = keras_tuner.RandomSearch(build, objective="val_loss", max_trials=2, seed=4)
tuner.search(
    x,
    y,
    epochs=3,
    batch_size=8,
    validation_split=0.25,
    callbacks=[keras.callbacks.TensorBoard("tb_logs", update_freq=2, histogram_freq=1)],
)
best = tuner.hypermodel.build(tuner.get_best_hyperparameters()[0])
best.fit(x, y, epochs=2, batch_size=8, callbacks=[keras.callbacks.TensorBoard("tb_final")])
print("TB_TRIALS", sorted(os.listdir("tb_logs")))
