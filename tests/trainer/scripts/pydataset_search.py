# A PyDataset as users write one: it reshuffles its samples in on_epoch_end with its own
# seeded RNG (so every epoch's batches depend on the epochs before), fit with Keras's
# default shuffle=True (the batch order); a validation PyDataset.
import keras
import keras_tuner
import numpy as np

rng = np.random.default_rng(5)
x = rng.normal(size=(160, 6)).astype("float32")
y = (x[:, 0] - x[:, 2] > 0).astype("int32")


class Samples(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size, reshuffle, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size
        self.order = np.arange(len(x))
        self.rng = np.random.default_rng(11) if reshuffle else None

    def __len__(self):
        return -(-len(self.x) // self.batch_size)

    def __getitem__(self, index):
        rows = self.order[index * self.batch_size : (index + 1) * self.batch_size]
        return self.x[rows], self.y[rows]

    def on_epoch_end(self):
        if self.rng is not None:
            self.order = self.rng.permutation(len(self.x))


train = Samples(x[:128], y[:128], 8, reshuffle=True)
val = Samples(x[128:], y[128:], 8, reshuffle=False)


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
