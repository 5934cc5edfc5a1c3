# The seed document's script as its user wrote it (Hyperband over a CNN for EMG
# windows under a module-level MirroredStrategy, no strategy scope in build,
# EarlyStopping on val_loss, then the best model fitted again inside the scope), with
# tiny sizes and synthetic arrays of the seed's shapes so a test runs in seconds.
import keras
import numpy as np
import tensorflow as tf
from keras.layers import Conv2D, Dense, Dropout, Flatten, Input, MaxPooling2D
from keras.models import Model
from keras_tuner import Hyperband, HyperModel

rng = np.random.default_rng(0)
labels = rng.integers(0, 4, size=120)
training_input = (rng.normal(size=(96, 16, 8, 1)) + labels[:96, None, None, None]).astype("float32")
training_output = np.eye(4, dtype="float32")[labels[:96]]
testing_input = (rng.normal(size=(24, 16, 8, 1)) + labels[96:, None, None, None]).astype("float32")
testing_output = np.eye(4, dtype="float32")[labels[96:]]


class CNNHyperModel(HyperModel):
    def __init__(self, input_shape, output_shape):
        self.input_shape = input_shape
        self.output_shape = output_shape

    def build(self, hp):
        visible = Input(shape=(self.input_shape[0], self.input_shape[1], 1))
        filter_number = hp.Int("filter_base_size", 1, 2)
        conv = Conv2D(
            filters=2**filter_number, kernel_size=(4, 4), activation="relu", padding="same"
        )(visible)
        pooling = MaxPooling2D(pool_size=(2, 2), strides=2, padding="valid")(conv)
        flatten = Flatten()(pooling)
        dropout = Dropout(0.5)(flatten)
        num_layers = hp.Int("num_layers", 1, 2)
        dense_units = [hp.Int("dense_units_1", 8, 16, 8), hp.Int("dense_units_2", 8, 16, 8)]
        hidden = dropout
        for i in range(num_layers):
            hidden = Dense(units=dense_units[i], activation="relu")(hidden)
        output = Dense(units=self.output_shape[0], activation="softmax")(hidden)
        model = Model(inputs=visible, outputs=output)
        model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
        return model


strategy = tf.distribute.MirroredStrategy()
batch_size = 8
epochs = 3
val_dataset = (np.array(testing_input), np.array(testing_output))

tuner = Hyperband(
    hypermodel=CNNHyperModel(
        input_shape=[len(training_input[0]), len(training_input[0][0])],
        output_shape=[len(training_output[0])],
    ),
    objective="accuracy",
    max_epochs=3,
    factor=3,
    distribution_strategy=strategy,
    hyperband_iterations=1,
    seed=11,
    directory="my_dir",
    project_name="emg",
)

early_stopping_callback = keras.callbacks.EarlyStopping(monitor="val_loss", patience=5)

tuner.search(
    x=np.array(training_input),
    y=np.array(training_output),
    validation_data=val_dataset,
    callbacks=[early_stopping_callback],
    batch_size=batch_size,
    epochs=epochs,
)

best_model = tuner.get_best_models(num_models=1)[0]

with strategy.scope():
    best_model.fit(
        x=np.array(training_input),
        y=np.array(training_output),
        epochs=epochs,
        batch_size=batch_size,
        validation_data=val_dataset,
    )

tuner.results_summary()
