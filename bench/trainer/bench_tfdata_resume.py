"""The cost of resuming into the middle of a tf.data epoch (`make bench-trainer`).

A TFRecord set on disk as image pipelines read one: RECORDS records of a 32x32x3 uint8
image and a label in 8 files, interleaved, shuffled (buffer SHUFFLE, reshuffled each
iteration), decoded and normalised, batched by 64, prefetched, repeated. Measured for
the trainer's method (data/inputs/stream.py: replay the iterators made before, then read
the batches already trained) and for what TensorFlow offers instead:

- replay: seconds to make and drop one iterator (per iterator an earlier epoch made);
- read: seconds per 1,000 batches read to reach the checkpointed position (the cost
  grows with the position: a resume at batch b of an epoch reads b batches);
- `skip(n)`: the same reading inside TensorFlow (it still reads every skipped element);
- iterator checkpoint (`tf.train.Checkpoint(iterator=...)`): bytes and seconds to
  save one, seconds to restore it: constant in the position but it holds the shuffle
  and prefetch buffers, written at every checkpoint.

Writes bench/results/tfdata_resume.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "bench" / "results" / "tfdata_resume.json"
sys.path[:0] = [str(REPO / "contract"), str(REPO / "trainer_image")]


def write_records(directory: Path, records: int, files: int = 8) -> int:
    import numpy as np
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    size = 0
    per_file = records // files
    for f in range(files):
        path = directory / f"train-{f:05d}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for _ in range(per_file):
                image = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
                feature = {
                    "image": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[image.tobytes()])
                    ),
                    "label": tf.train.Feature(
                        int64_list=tf.train.Int64List(value=[int(rng.integers(10))])
                    ),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
        size += path.stat().st_size
    return size


def pipeline(directory: Path, shuffle: int) -> Any:
    import tensorflow as tf

    features = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(record: Any) -> Any:
        example = tf.io.parse_single_example(record, features)
        image = tf.reshape(tf.io.decode_raw(example["image"], tf.uint8), (32, 32, 3))
        return tf.cast(image, tf.float32) / 255.0, example["label"]

    files = tf.data.Dataset.list_files(str(directory / "train-*.tfrecord"), shuffle=False)
    data = files.interleave(
        tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE
    )
    data = data.shuffle(shuffle, reshuffle_each_iteration=True)
    data = data.map(parse, num_parallel_calls=tf.data.AUTOTUNE).repeat()
    return data.batch(64).prefetch(tf.data.AUTOTUNE)


def timed(fn: Any, repeats: int = 3) -> float:
    """The best of `repeats` runs (the machine is shared)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import tensorflow as tf
    from tuneop_trainer.data.inputs import iterations
    from tuneop_trainer.data.inputs import stream as tfdata

    data_bytes = write_records(work / "records", args.records)
    dataset = pipeline(work / "records", args.shuffle)
    stream = tfdata.Stream(dataset, steps_per_epoch=1000)

    def replay() -> None:
        for _ in range(10):
            iter(dataset)

    def read(n: int) -> Any:
        def run() -> None:  # the next iterator, read to batch n: what a resume does
            made = iterations.counter(dataset)[0]
            state = {"iterations": made + 1, "seen": n, "alive": True, "numBatches": None}
            stream.restore(state)

        return run

    def skip(n: int) -> Any:
        def run() -> None:
            next(iter(dataset.skip(n)))

        return run

    def consume(iterator: Any, n: int) -> Any:
        for _ in range(n):
            next(iterator)
        return iterator

    rows: dict[str, Any] = {"replayOneIteratorSeconds": round(timed(replay) / 10, 4)}
    positions = [int(p) for p in args.positions.split(",")]
    rows["readSeconds"] = {str(n): round(timed(read(n)), 3) for n in positions}
    rows["skipSeconds"] = {str(n): round(timed(skip(n)), 3) for n in positions}
    per = max(positions)
    rows["readSecondsPer1000Batches"] = round(1000 * rows["readSeconds"][str(per)] / per, 3)
    rows["skipSecondsPer1000Batches"] = round(1000 * rows["skipSeconds"][str(per)] / per, 3)

    iterator = consume(iter(dataset), 100)
    ckpt = tf.train.Checkpoint(iterator=iterator)
    prefix = str(work / "iterator" / "ckpt")
    t0 = time.perf_counter()
    path = ckpt.write(prefix)
    save_seconds = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in (work / "iterator").iterdir())
    restored = tf.train.Checkpoint(iterator=iter(dataset))
    t0 = time.perf_counter()
    restored.read(path).assert_consumed()
    restore_seconds = time.perf_counter() - t0
    rows["iteratorCheckpoint"] = {
        "bytes": size,
        "saveSeconds": round(save_seconds, 3),
        "restoreSeconds": round(restore_seconds, 3),
    }
    return {
        "records": args.records,
        "dataBytes": data_bytes,
        "shuffleBuffer": args.shuffle,
        "batchSize": 64,
        "batchesPerPass": args.records // 64,
        **rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--shuffle", type=int, default=10000)
    parser.add_argument("--positions", default="250,1000,2000")
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-tfdata-"))
    report = bench(args, work)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    mb = report["dataBytes"] / 1e6
    print(
        f"tf.data resume: {report['records']} records ({mb:.0f} MB TFRecord), shuffle "
        f"buffer {report['shuffleBuffer']}, batches of 64"
    )
    print(f"{'method':<34} {'cost':>28}")
    print(f"{'replay one earlier iterator':<34} {report['replayOneIteratorSeconds']:>26} s")
    for n, s in report["readSeconds"].items():
        print(f"{'read to batch ' + n + ' (trainer)':<34} {s:>26} s")
    for n, s in report["skipSeconds"].items():
        print(f"{'skip(' + n + ')':<34} {s:>26} s")
    print(
        f"{'per 1,000 batches: read / skip':<34} "
        f"{report['readSecondsPer1000Batches']:>12} s / {report['skipSecondsPer1000Batches']} s"
    )
    it = report["iteratorCheckpoint"]
    print(
        f"{'iterator checkpoint (per save)':<34} {it['bytes'] / 1e6:>10.1f} MB, save "
        f"{it['saveSeconds']} s, restore {it['restoreSeconds']} s"
    )
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
