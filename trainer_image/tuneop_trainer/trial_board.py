"""Spec mode's TensorBoard logs (`spec.tuner.tensorboard: true`): one run per trial
execution in keras-tuner's layout, `DIR/tensorboard/<trial>/execution<n>`, with the
HParams dashboard's session records in that directory and the epoch summaries Keras's
TensorBoard callback writes (`epoch_<metric>` in `train/`, `validation/`, step = the
epoch index), so a spec-mode search reads in TensorBoard like a script's. Written by the
trainer at every epoch end (spec mode's epoch loop runs one Keras fit per epoch, which a
TensorBoard callback would see as many one-epoch trainings); each step once after a
preemption through event_logs.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuneop_contract import TENSORBOARD_DIR

from .event_logs import EventLogs

SUBDIRS = ("", "train", "validation")


class TrialBoard:
    def __init__(self, root: Path, exec_dir: Path, trial_id: str, execution: int) -> None:
        self.dir = root / TENSORBOARD_DIR / str(trial_id) / f"execution{execution}"
        self.trial_id = str(trial_id)
        self._writers: dict[str, Any] = {}
        self.logs = EventLogs(
            root, exec_dir, [str(self.dir / sub) for sub in SUBDIRS], self._writers.values
        )

    def _writer(self, sub: str) -> Any:
        if sub not in self._writers:
            import tensorflow as tf

            self._writers[sub] = tf.summary.create_file_writer(str(self.dir / sub))
        return self._writers[sub]

    def begin(self, hp: Any, resumed: dict[str, Any] | None) -> None:
        """Rewind to the checkpoint's record (`resumed`: its metadata) or to the
        execution's start; a fresh execution writes its HParams session start."""
        if resumed is not None:
            self.logs.rewind(resumed.get(TENSORBOARD_DIR))  # the key _checkpoint writes
            return
        self.logs.start()
        from keras_tuner.src.engine import tuner_utils
        from tensorboard.plugins.hparams import api as hparams_api

        hparams = tuner_utils.convert_hyperparams_to_hparams(hp, hparams_api)
        with self._writer("").as_default():
            hparams_api.hparams(hparams, trial_id=self.trial_id)

    def epoch(self, epoch: int, logs: dict[str, float]) -> None:
        """An epoch's metrics, named and placed as Keras's TensorBoard callback does."""
        import tensorflow as tf

        for sub, items in (
            ("train", [(k, v) for k, v in logs.items() if not k.startswith("val_")]),
            ("validation", [(k[4:], v) for k, v in logs.items() if k.startswith("val_")]),
        ):
            if items:
                with self._writer(sub).as_default():
                    for name, value in items:
                        tf.summary.scalar(f"epoch_{name}", value, step=epoch)

    def sizes(self) -> dict[str, int]:
        return self.logs.sizes()

    def end(self) -> None:
        """The HParams session end (as keras-tuner's callback writes it), writers closed."""
        import tensorflow as tf
        from tensorboard.plugins.hparams import api_pb2, summary

        with self._writer("").as_default():
            pb = summary.session_end_pb(api_pb2.STATUS_SUCCESS)
            tf.summary.experimental.write_raw_pb(pb.SerializeToString(), step=0)
        for writer in self._writers.values():
            writer.close()
