"""Run the trainer the way a pod does: `python -m tuneop_trainer run` in a subprocess,
with kills injected at chosen points.

Trainers run on one logical CPU device (a one-GPU pod: the default strategy) unless the
test says otherwise: a test or module whose subject is what replicas do (exact resume
under MirroredStrategy, per-replica input positions, scope errors) carries
`pytest.mark.devices(2)`, and tests/trainer/conftest.py sets `DEVICES` from the mark
for its fixtures and body. Two replicas double each trial's tracing on this machine."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from tuneop_contract import (
    ENV_LOGICAL_CPU_DEVICES,
    ENV_METRICS_PORT,
    EXIT_COMPLETED,
    RESULTS_FILE,
    Progress,
    read_progress,
)

from tests.checkpoints import committed
from tests.forkserver import TrainerProcess, launch

REPO = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(str(REPO / p) for p in ("contract", "operator", "trainer_image", "."))


def tiny_spec(samples: int = 80, name: str = "tiny", **tuner: Any) -> dict[str, Any]:
    """A TuningJob manifest for a search that takes seconds: tiny CNN, tiny data."""
    spec_tuner = {
        "algorithm": "Hyperband",
        "maxEpochs": 2,
        "factor": 2,
        "seed": 7,
        "batchSize": 8,
        "deterministic": True,
        "objective": {"name": "val_accuracy", "direction": "max"},
    }
    spec_tuner.update(tuner)
    return {
        "apiVersion": "tuneop.io/v1alpha1",
        "kind": "TuningJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "hypermodel": "tuneop_trainer.examples.emg:TinyCNNHyperModel",
            "data": {"synthetic": {"samples": samples, "seed": 3}, "validationSplit": 0.2},
            "tuner": spec_tuner,
            "checkpoint": {"intervalSteps": 3, "intervalSeconds": 0, "keep": 2},
        },
    }


def write_spec(tmp: Path, manifest: dict[str, Any], name: str = "spec.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(manifest))
    return path


DEVICES = [1]
"""The logical devices of the running test's trainers (one item, set by conftest.py)."""


def env(devices: int | None = None) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = PYTHONPATH
    e[ENV_LOGICAL_CPU_DEVICES] = str(devices or DEVICES[0])
    e[ENV_METRICS_PORT] = "0"
    e["TF_CPP_MIN_LOG_LEVEL"] = "2"
    e["PYTHONUNBUFFERED"] = "1"
    return e


def start(
    spec: Path, ckpt: Path, log: Path, devices: int | None = None, fresh: bool = False
) -> TrainerProcess:
    """`python -m tuneop_trainer run` (`fresh`: not forked, see forkserver.launch)."""
    command = ["-m", "tuneop_trainer", "run", "--spec", str(spec), "--dir", str(ckpt)]
    return launch(command, env(devices), log, fresh=fresh)


SCRIPTS = Path(__file__).resolve().parent / "scripts"


def in_project(oracle: Any, root: Path) -> Any:
    """`oracle` (a keras-tuner Oracle) with its project at `root/p`, reloaded when one was
    saved there, as a tuner's constructor does with overwrite=False."""
    oracle._set_project_dir(str(root), "p")
    if (root / "p" / "oracle.json").exists():
        oracle.reload()
    return oracle


def start_exec(
    script: Path,
    ckpt: Path,
    log: Path,
    *args: str,
    devices: int | None = None,
    cwd: Path | None = None,
    fresh: bool = False,
    options: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> TrainerProcess:
    """`python -m tuneop_trainer exec --deterministic [options]` on a user script (script
    mode), `args` its arguments."""
    settings = ckpt.parent / "exec-spec.yaml"
    if not settings.exists():  # checkpoints every 3 steps: kill points land mid-epoch
        settings.write_text(
            yaml.safe_dump({"checkpoint": {"intervalSteps": 3, "intervalSeconds": 0}})
        )
    command = ["-m", "tuneop_trainer", "exec", "--dir", str(ckpt)]
    command += ["--spec", str(settings), "--deterministic", *options, str(script), *args]
    environ = {**env(devices), **(extra_env or {})}
    return launch(command, environ, log, cwd=cwd or ckpt.parent, fresh=fresh)


def kill_exec_when(
    script: Path,
    ckpt: Path,
    log: Path,
    pred: Any,
    *args: str,
    sig: int = signal.SIGKILL,
    options: tuple[str, ...] = (),
) -> int:
    """Start `exec` on the script, send `sig` once pred(progress) holds, return its exit."""
    return signal_when(start_exec(script, ckpt, log, *args, options=options), ckpt, pred, sig)


def trial_fit(trial: str, n: int = 0, project: str = "untitled_project") -> str:
    """A script-mode trial's fit directory: `trials/<tuner's project>/<trial>/fit-<n>`."""
    return f"trials/{project}/{trial}/fit-{n}"


def fit_final(ckpt: Path, fit_dir: str) -> dict[str, Any]:
    """meta.json of a fit's final ("done") checkpoint: history, epochs, callbacks."""
    latest = sorted((ckpt / fit_dir).glob("ckpt-*"))[-1]
    meta: dict[str, Any] = json.loads((latest / "meta.json").read_text())
    assert meta["done"], f"{latest} is not the final checkpoint"
    return meta


def fit_weights(ckpt: Path, fit_dir: str) -> str:
    """sha256 of the model variables in a fit's final ("done") checkpoint."""
    import hashlib

    import numpy as np

    latest = sorted((ckpt / fit_dir).glob("ckpt-*"))[-1]
    meta = json.loads((latest / "meta.json").read_text())
    assert meta["done"], f"{latest} is not the final checkpoint"
    digest = hashlib.sha256()
    with np.load(latest / "state.npz") as npz:
        for key in npz.files:
            if key.startswith("model/"):
                digest.update(key.encode() + npz[key].tobytes())
    return digest.hexdigest()


SPEC_PROJECT = "search"  # spec mode's keras-tuner project (modes/tuningjob.py PROJECT)


def spec_trial(trial_id: str) -> str:
    """A spec-mode trial's directory: `trials/search/<trial>` (its fits in `fit-<n>`)."""
    return f"trials/{SPEC_PROJECT}/{trial_id}"


def spec_fit(trial_id: str, execution: int = 0) -> str:
    """A spec-mode trial execution's fit directory."""
    return trial_fit(trial_id, execution, SPEC_PROJECT)


def run(spec: Path, ckpt: Path, log: Path, timeout: float = 240) -> int:
    proc = start(spec, ckpt, log)
    return proc.wait(timeout=timeout)


def wait_for(proc: TrainerProcess, ckpt: Path, pred: Any, timeout: float = 180) -> Progress:
    """Poll progress.json until pred(progress) holds; fail if the trainer exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited with {proc.returncode} before the kill point")
        try:
            progress = read_progress(ckpt)
        except (ValueError, OSError):
            progress = None
        if progress is not None and pred(progress):
            return progress
        time.sleep(0.005)  # kill points can be a few steps (tens of ms) wide
    raise AssertionError("kill point not reached in time")


def kill_when(
    spec: Path, ckpt: Path, log: Path, pred: Any, sig: int = signal.SIGKILL, delay: float = 0.0
) -> int:
    """Start the trainer, send `sig` once pred(progress) holds (+delay), return its exit code."""
    return signal_when(start(spec, ckpt, log), ckpt, pred, sig, delay)


def signal_when(proc: TrainerProcess, ckpt: Path, pred: Any, sig: int, delay: float = 0.0) -> int:
    """Send `sig` to a started trainer once pred(progress) holds (+delay); its exit code."""
    try:
        wait_for(proc, ckpt, pred)
        time.sleep(delay)
        proc.send_signal(sig)
        return proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def kill_and_resume(spec: Path, ckpt: Path, log: Path, pred: Any) -> str:
    """SIGKILL the trainer once pred(progress) holds, run it again to the end; its log."""
    assert kill_when(spec, ckpt, log, pred) == -signal.SIGKILL
    assert run(spec, ckpt, log) == EXIT_COMPLETED, log.read_text()[-3000:]
    return log.read_text()


def status_mb(pid: int, *fields: str) -> tuple[float, ...] | None:
    """Memory fields of /proc/PID/status in MB (VmRSS; RssAnon, the process's own
    memory; RssFile, the mapped file pages it touched: page cache the kernel reclaims
    under pressure), or None once the process is gone (a zombie has no memory fields)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    values = dict(line.split(":", 1) for line in lines)
    if any(f not in values for f in fields):
        return None
    return tuple(int(values[f].split()[0]) / 1024 for f in fields)


def results(ckpt: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ckpt / RESULTS_FILE).read_text())
    return data


def comparable(res: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (t["trialId"], t["status"], t["score"], json.dumps(t["hyperparameters"], sort_keys=True))
        for t in res["trials"]
    ]


def assert_killed_search_matches(
    script: Path, tmp: Path, kills: tuple[tuple[str, int], ...], min_step: int
) -> str:
    """Run `script` uninterrupted, then SIGKILL it once in each (trial, epoch) of `kills`
    at step >= min_step, once the trial's first fit has a checkpoint committed past that
    epoch's start, and resume it to the end: same results, and each trial's first fit has
    the same history and final weights. Returns the resumed runs' log."""
    ref, log = tmp / "ref", tmp / "ref.log"
    proc = start_exec(script, ref, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert "exact only if" not in log.read_text()  # no inexact-resume warning
    ckpt, log = tmp / "ckpt", tmp / "log"
    for trial, epoch in kills:
        code = kill_exec_when(
            script,
            ckpt,
            log,
            lambda p, t=trial, e=epoch: (
                p.trial_id == t
                and p.epoch >= e
                and p.step >= min_step
                and committed(ckpt / trial_fit(t), at=(e, 1))
            ),
        )
        assert code == -signal.SIGKILL
    proc = start_exec(script, ckpt, log)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    text = log.read_text()
    for trial, _ in kills:
        assert f"trial {trial} fit 0: restored" in text
    assert comparable(results(ckpt)) == comparable(results(ref))
    for trial, _ in kills:
        fit = trial_fit(trial)
        assert fit_final(ckpt, fit)["history"] == fit_final(ref, fit)["history"]
        assert fit_weights(ckpt, fit) == fit_weights(ref, fit)
    return text


def write_records(directory: Path, files: int = 4, per_file: int = 16) -> None:
    """`files` training shards and one validation file of (x: 6 floats, y: 0/1)."""
    import numpy as np
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)

    def write(path: Path, n: int) -> None:
        x = rng.normal(size=(n, 6)).astype("float32")
        y = (x[:, 0] - x[:, 2] > 0).astype("int64")
        with tf.io.TFRecordWriter(str(path)) as writer:
            for xi, yi in zip(x, y, strict=True):
                feature = {
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=xi)),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[yi])),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())

    for i in range(files):
        write(directory / f"train-{i:05d}.tfrecord", per_file)
    write(directory / "val.tfrecord", 16)


VALUED = ("scalars", "histograms")
"""TensorBoard plugins whose values must equal an uninterrupted run's (the model summary,
the graph and the HParams session records carry names and times of the process that
wrote them)."""


def events(root: Path) -> dict[str, list[tuple[str, int, bytes | None]]]:
    """Every TensorBoard run under `root` (its directory, relative): its events in the
    order TensorBoard reads them (files by name, records in order) as (tag, step, the
    tensor of a scalar or histogram); graphs as ("graph", step, None)."""
    import tensorflow as tf

    runs: dict[str, list[tuple[str, int, bytes | None]]] = {}
    for directory in sorted({p.parent for p in root.rglob("events.out.tfevents.*")}):
        plugins: dict[str, str] = {}
        out = runs.setdefault(str(directory.relative_to(root)), [])
        for path in sorted(directory.glob("events.out.tfevents.*")):
            for event in tf.compat.v1.train.summary_iterator(str(path)):
                if event.HasField("graph_def"):
                    out.append(("graph", event.step, None))
                for value in event.summary.value:
                    if value.metadata.plugin_data.plugin_name:
                        plugins[value.tag] = value.metadata.plugin_data.plugin_name
                    valued = plugins.get(value.tag) in VALUED
                    payload = value.tensor.SerializeToString() if valued else None
                    out.append((value.tag, event.step, payload))
    return runs


def once_each(runs: dict[str, list[tuple[str, int, Any]]]) -> dict[str, list[tuple[str, int]]]:
    """Per run, the (tag, step) pairs written more than once (none: every step once)."""
    counts = {run: Counter((tag, step) for tag, step, _ in items) for run, items in runs.items()}
    twice = {run: [key for key, n in c.items() if n > 1] for run, c in counts.items()}
    return {run: keys for run, keys in twice.items() if keys}


def optimizer_in_weights_file(path: Path) -> tuple[int, str]:
    """(iteration, sha256 of every optimizer variable in order) of a Keras weights file
    (keras-tuner's best epoch of a trial)."""
    import h5py
    import numpy as np

    with h5py.File(path, "r") as f:
        group = f["optimizer/vars"]
        values = [np.asarray(group[str(i)]) for i in range(len(group))]
    digest = hashlib.sha256()
    for value in values:
        digest.update(value.tobytes())
    return int(values[0]), digest.hexdigest()


def final_iteration(ckpt: Path, fit_dir: str) -> int:
    """The optimizer's iteration count in a fit's latest checkpoint."""
    import numpy as np

    latest = sorted((ckpt / fit_dir).glob("ckpt-*"))[-1]
    with np.load(latest / "state.npz") as state:
        (key,) = [k for k in state.files if k.startswith("optimizer/") and "iteration" in k]
        return int(state[key])


CONTINUING = re.compile(
    r"continuing trial (\w+)'s best epoch: weights and optimizer state "
    r"\(iteration (\d+), optimizer sha256 (\w+)\)"
)
"""The trainer's log line when a promoted Hyperband trial continues the optimizer."""
