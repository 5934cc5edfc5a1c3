"""Small faithful version of the KerasTuner guide "Visualize the hyperparameter tuning
process".

Follows keras-team/keras-io guides/keras_tuner/visualize_tuning.py (Keras 3 version,
`import keras`). The guide's code is kept as written: an MNIST build function choosing
between an MLP and a CNN (conditional hyperparameters), quick test builds through
`hp.values["model_type"] = ...`, one RandomSearch(objective="val_accuracy",
overwrite=True, directory=..., no project_name) and a search with
validation_split=0.2, epochs=2 and a `keras.callbacks.TensorBoard(log_dir)` callback.

Changes: `keras.datasets.mnist.load_data()` is replaced by synthetic MNIST-like uint8
arrays (128 train and 32 test images of 28x28, uint8 labels 0..9) drawn from a separate
np.random.default_rng(0); the guide's preprocessing (float32 / 255, expand_dims) is
unchanged. max_trials 10 -> 3. The absolute "/tmp/tb" directory and "/tmp/tb_logs"
TensorBoard log dir become the relative "tb" and "tb_logs". The `%load_ext tensorboard`
/ `%tensorboard` lines of the guide were only in prose and are not run. Added only the
`RESULT` lines and the final `GUIDE_RESULT` print; the guide's prose strings are
dropped or shortened (no-op statements).
"""

import json
import os

import numpy as np
import keras_tuner
import keras
from keras import layers

# Synthetic stand-in for keras.datasets.mnist.load_data() (uint8 images and labels).
_rng = np.random.default_rng(0)
(x_train, y_train), (x_test, y_test) = (
    (
        _rng.integers(0, 256, (128, 28, 28), dtype=np.uint8),
        _rng.integers(0, 10, (128,), dtype=np.uint8),
    ),
    (
        _rng.integers(0, 256, (32, 28, 28), dtype=np.uint8),
        _rng.integers(0, 10, (32,), dtype=np.uint8),
    ),
)
# Normalize the pixel values to the range of [0, 1].
x_train = x_train.astype("float32") / 255
x_test = x_test.astype("float32") / 255
# Add the channel dimension to the images.
x_train = np.expand_dims(x_train, -1)
x_test = np.expand_dims(x_test, -1)
# Print the shapes of the data.
print(x_train.shape)
print(y_train.shape)
print(x_test.shape)
print(y_test.shape)


def build_model(hp):
    inputs = keras.Input(shape=(28, 28, 1))
    # Model type can be MLP or CNN.
    model_type = hp.Choice("model_type", ["mlp", "cnn"])
    x = inputs
    if model_type == "mlp":
        x = layers.Flatten()(x)
        # Number of layers of the MLP is a hyperparameter.
        for i in range(hp.Int("mlp_layers", 1, 3)):
            # Number of units of each layer are
            # different hyperparameters with different names.
            x = layers.Dense(
                units=hp.Int(f"units_{i}", 32, 128, step=32),
                activation="relu",
            )(x)
    else:
        # Number of layers of the CNN is also a hyperparameter.
        for i in range(hp.Int("cnn_layers", 1, 3)):
            x = layers.Conv2D(
                hp.Int(f"filters_{i}", 32, 128, step=32),
                kernel_size=(3, 3),
                activation="relu",
            )(x)
            x = layers.MaxPooling2D(pool_size=(2, 2))(x)
        x = layers.Flatten()(x)

    # A hyperparamter for whether to use dropout layer.
    if hp.Boolean("dropout"):
        x = layers.Dropout(0.5)(x)

    # The last layer contains 10 units,
    # which is the same as the number of classes.
    outputs = layers.Dense(units=10, activation="softmax")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)

    # Compile the model.
    model.compile(
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        optimizer="adam",
    )
    return model


# Initialize the `HyperParameters` and set the values.
hp = keras_tuner.HyperParameters()
hp.values["model_type"] = "cnn"
# Build the model using the `HyperParameters`.
model = build_model(hp)
# Test if the model runs with our data.
model(x_train[:100])
# Print a summary of the model.
model.summary()

# Do the same for MLP model.
hp.values["model_type"] = "mlp"
model = build_model(hp)
model(x_train[:100])
model.summary()

tuner = keras_tuner.RandomSearch(
    build_model,
    max_trials=3,
    # Do not resume the previous search in the same directory.
    overwrite=True,
    objective="val_accuracy",
    # Set a directory to store the intermediate results.
    directory="tb",
)

tuner.search(
    x_train,
    y_train,
    validation_split=0.2,
    epochs=2,
    # Use the TensorBoard callback.
    # The logs will be write to "tb_logs".
    callbacks=[keras.callbacks.TensorBoard("tb_logs")],
)

# If running in Colab, the guide shows TensorBoard here with
# `%load_ext tensorboard` and `%tensorboard --logdir /tmp/tb_logs` (not run).

RESULT = {
    "untitled_project": [
        {
            "id": t.trial_id,
            "status": t.status,
            "score": None if t.score is None else float(t.score),
        }
        for t in tuner.oracle.trials.values()
    ],
    "tb_logs_trial_dirs": sorted(os.listdir("tb_logs")),
}
print("GUIDE_RESULT " + json.dumps(RESULT, sort_keys=True))
