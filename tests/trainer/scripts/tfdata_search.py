# A tf.data pipeline as users write one: shuffle with reshuffle_each_iteration (no
# seed of its own), map, batch, prefetch; a validation dataset.
import keras
import keras_tuner
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(4)
x = rng.normal(size=(160, 6)).astype("float32")
y = (x[:, 0] - x[:, 2] > 0).astype("int32")
train = (
    tf.data.Dataset.from_tensor_slices((x[:128], y[:128]))
    .shuffle(128, reshuffle_each_iteration=True)
    .map(lambda a, b: (a * 2.0, b), num_parallel_calls=tf.data.AUTOTUNE)
    .batch(8)
    .prefetch(tf.data.AUTOTUNE)
)
val = tf.data.Dataset.from_tensor_slices((x[128:] * 2.0, y[128:])).batch(8)


def build(hp):
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(hp.Int("units", 4, 8, step=4), activation="relu"),
            keras.layers.Dropout(0.1),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


tuner = keras_tuner.RandomSearch(build, objective="val_loss", max_trials=2, seed=2, directory="kt")
tuner.search(train, validation_data=val, epochs=4, verbose=0)
