# A plain keras-tuner script: RandomSearch over a dense classifier, then the usual
# post-search code (best hyperparameters, a final fit on all the data).
import keras
import keras_tuner
import numpy as np

rng = np.random.default_rng(2)
labels = rng.integers(0, 2, size=320)
x = rng.normal(size=(320, 4)).astype("float32") + labels[:, None]
y = labels.astype("int32")


def build(hp):
    model = keras.Sequential(
        [
            keras.Input(shape=(4,)),
            keras.layers.Dense(hp.Int("units", 4, 32, step=4), activation="relu"),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(hp.Float("lr", 1e-3, 1e-2, sampling="log")),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


tuner = keras_tuner.RandomSearch(build, objective="val_loss", max_trials=4, seed=4)
tuner.search(x, y, epochs=2, batch_size=8, validation_split=0.25)

best_hp = tuner.get_best_hyperparameters(1)[0]
print("best hyperparameters:", best_hp.values)
model = tuner.hypermodel.build(best_hp)
history = model.fit(x, y, epochs=2, batch_size=8, verbose=0)
print("final fit done:", [round(v, 6) for v in history.history["loss"]])
