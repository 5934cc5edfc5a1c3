# A search over TFRecord files on disk, as users read them: files listed in order,
# interleaved, shuffled each iteration, parsed, batched, prefetched. By default the
# pipeline is made once, at the top, and each epoch is one pass of unknown length.
# TFRECORD_MODE "stream": each trial makes its own repeated pipeline in HyperModel.fit
# (as when the batch size is tuned) and fits with steps_per_epoch, so epochs cross the
# data's passes.
import os
import time

import keras
import keras_tuner
import tensorflow as tf

STREAM = os.environ.get("TFRECORD_MODE") == "stream"
AUTOTUNE = tf.data.AUTOTUNE
FEATURES = {
    "x": tf.io.FixedLenFeature([6], tf.float32),
    "y": tf.io.FixedLenFeature([], tf.int64),
}


def parse(record):
    example = tf.io.parse_single_example(record, FEATURES)
    return example["x"] * 2.0, example["y"]


def pipeline(repeat: bool):
    files = tf.data.Dataset.list_files("records/train-*.tfrecord", shuffle=False)
    data = files.interleave(
        tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=AUTOTUNE, deterministic=True
    )
    data = data.shuffle(48, reshuffle_each_iteration=True).map(parse, num_parallel_calls=AUTOTUNE)
    if repeat:
        data = data.repeat()
    return data.batch(8).prefetch(AUTOTUNE)


# TFRECORD_SLOW_VALIDATION: validation takes a while, a window to kill the trainer in;
# the file it names is made when validation starts.
SLOW = os.environ.get("TFRECORD_SLOW_VALIDATION")


def slow(a, b):
    def wait(t):
        if SLOW:
            open(SLOW, "a").close()
            time.sleep(1.0)
        return t

    a = tf.numpy_function(wait, [a], tf.float32)
    return tf.ensure_shape(a, [None, 6]), b


val = tf.data.TFRecordDataset("records/val.tfrecord").map(parse).batch(8).map(slow)


class Model(keras_tuner.HyperModel):
    def build(self, hp):
        return build(hp)

    def fit(self, hp, model, *args, **kwargs):
        if STREAM:
            return model.fit(pipeline(repeat=True), *args, steps_per_epoch=5, **kwargs)
        return model.fit(*args, **kwargs)


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


tuner = keras_tuner.RandomSearch(
    Model(), objective="val_loss", max_trials=2, seed=2, directory="kt"
)
if STREAM:
    tuner.search(validation_data=val, epochs=3, verbose=0)
else:
    tuner.search(pipeline(repeat=False), validation_data=val, epochs=3, verbose=0)
