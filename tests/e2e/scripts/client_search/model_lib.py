"""A helper module beside the search script, as users split their code: the model."""

import keras


def build(hp):
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(hp.Int("units", 4, 16, step=4), activation="relu"),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(hp.Choice("learning_rate", [1e-2, 1e-3])),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model
