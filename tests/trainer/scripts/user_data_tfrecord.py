"""A spec-mode loader returning TFRecord-backed `tf.data` datasets, reshuffled at every
iteration, and a HyperModel for them; imported through `spec.pythonPath`. The records'
directory comes from USER_RECORDS (the trainer's cwd is the test's); USER_SLOW_VALIDATION
makes each validation batch take a second (same data) and names a file made when
validation starts, to kill a run while it validates."""

from __future__ import annotations

import os
import time
from typing import Any

import keras
import tensorflow as tf

FEATURES = {
    "x": tf.io.FixedLenFeature([6], tf.float32),
    "y": tf.io.FixedLenFeature([], tf.int64),
}


def _parse(record: Any) -> Any:
    example = tf.io.parse_single_example(record, FEATURES)
    return example["x"], example["y"]


def load() -> tuple[Any, Any]:
    root = os.environ["USER_RECORDS"]
    files = tf.data.Dataset.list_files(f"{root}/train-*.tfrecord", shuffle=False)
    train = files.interleave(tf.data.TFRecordDataset, cycle_length=2)
    train = train.shuffle(48, reshuffle_each_iteration=True).map(_parse).batch(8)
    val = tf.data.TFRecordDataset(f"{root}/val.tfrecord").map(_parse).batch(8)
    if os.environ.get("USER_SLOW_VALIDATION"):
        val = val.map(lambda x, y: (tf.py_function(_slow, [x], tf.float32), y))
        val = val.map(lambda x, y: (tf.ensure_shape(x, [None, 6]), y))
    return train.prefetch(2), val


def _slow(x: Any) -> Any:
    open(os.environ["USER_SLOW_VALIDATION"], "a").close()
    time.sleep(1.0)
    return x


def one_dataset() -> Any:
    return load()[0]


def not_pairs() -> tuple[Any, Any]:
    train, val = load()
    return train.map(lambda x, y: {"x": x, "y": y}), val


def build(hp: Any) -> Any:
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
