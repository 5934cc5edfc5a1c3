# Plain Keras fits over tf.data inputs, run as a script by itself and under the trainer:
# both must train on the same batches, so both print the same weights. A repeated
# (infinite) stream with steps_per_epoch continues across epochs; a pipeline of known
# length with steps_per_epoch not dividing it runs on and ends epochs at its end; a
# finite pipeline of unknown length starts over each epoch, with or without more
# steps_per_epoch than it has batches; all reshuffle each iteration.
import hashlib

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
tf.config.experimental.enable_op_determinism()

rng = np.random.default_rng(5)
x = rng.normal(size=(40, 4)).astype("float32")
y = (x[:, 0] > x[:, 1]).astype("int32")
base = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(40, reshuffle_each_iteration=True)
stream = base.repeat().batch(8)  # 5 batches a pass, epochs of 3
finite = base.filter(lambda a, b: a[2] > -1.0).batch(8)  # unknown cardinality


def model():
    # Dropout and Adam: their seed and step count show any train step that differs,
    # Keras's failing end-of-data step included.
    layers = [keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dropout(0.3)]
    m = keras.Sequential([*layers, keras.layers.Dense(2)])
    m.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy")
    return m


digest = hashlib.sha256()
known = base.batch(8)  # 5 batches: epochs of 3, 2, 3, 2
runs = (
    (stream, {"steps_per_epoch": 3}),
    (known, {"steps_per_epoch": 3}),
    (finite, {}),
    (finite, {"steps_per_epoch": 7}),  # more steps than the data has: it runs out
)
for data, extra in runs:
    m = model()
    m.fit(data, epochs=4, verbose=0, **extra)
    for w in m.get_weights():
        digest.update(w.tobytes())
print("WEIGHTS", digest.hexdigest(), flush=True)
