"""Checkpoint benchmark, real-size row (`make bench-trainer`): what a checkpoint of an
~11 M-parameter model (realsize_model.py; state with Adam ~132 MB) costs on the CPU.

In this process (the model built directly, no search):
  save        wall time of one complete save (write, checksum, fsync, rename)
  blocked     time the training thread waits per save (synchronous store: = save)
  peak extra  peak RSS above the RSS before the save, sampled every 2 ms while the save
              runs (with the background writer, training steps run meanwhile, so
              copy-on-write copies of the updated variables count too)
  cost        what a save costs training: blocked + the slowdown of the steps run while
              the writer works (synchronous store: the save); as overhead at one save per
              50 steps of this model and per 60 s (the default)
  restore     reading + sha256 verification + assigning into a fresh model
  auto        what `intervalSeconds: auto` would choose: its cost estimate (blocked + the
              writer's CPU time) beside the measured cost, and per MTBF the interval and
              the expected waste per hour there and at the fixed 60 s (measured cost)
In `python -m tuneop_trainer run` subprocesses (one trial, 3 epochs, batch 64):
  overhead    the fastest epoch after the first (3 epochs per run, 2 runs per setting,
              alternating) with a save every 50 steps over the same with only the
              epoch-end checkpoint, minus 1; and per save; the 60 s-interval (default)
              figure is that per-save cost / 60 s
  sigterm     SIGTERM (sent mid-epoch) to exit 75: finish the step, wait for a save in
              flight, write the preemption checkpoint, exit; must fit a 15 s notice
Timings are noisy on a shared machine. Writes bench/results/checkpoint.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import bench_trainer
import yaml

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
OUT = REPO / "bench" / "results" / "checkpoint.json"
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakRss:
    """Samples RSS on a thread; `extra` is the peak above the value at start."""

    def __enter__(self) -> PeakRss:
        self.base = rss()
        self.peak = self.base
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, rss())
            time.sleep(0.002)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, rss())

    @property
    def extra(self) -> int:
        return self.peak - self.base


def in_process(work: Path, repeats: int) -> dict[str, Any]:
    sys.path[:0] = [str(REPO / "contract"), str(REPO / "trainer_image"), str(HERE)]
    import keras
    import keras_tuner
    import numpy as np
    import realsize_model
    from tuneop_trainer import checkpoint as ck

    def fresh() -> Any:
        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        model = realsize_model.build(keras_tuner.HyperParameters())
        model.optimizer.build(model.trainable_variables)
        return model

    model = fresh()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 16, 8, 1)).astype("float32")
    y = np.eye(4, dtype="float32")[rng.integers(0, 4, 64)]
    model.train_on_batch(x, y)
    state = ck.model_state(model)
    out: dict[str, Any] = {
        "params": int(model.count_params()),
        "state_mb": round(sum(a.nbytes for a in state.values()) / MIB, 1),
    }
    del state
    t0 = time.monotonic()
    for _ in range(5):
        model.train_on_batch(x, y)
    step = (time.monotonic() - t0) / 5
    out["step_seconds"] = round(step, 4)

    sync = ck.CheckpointStore(work / "sync", keep=2)
    saves, peaks = [], []
    for i in range(repeats):
        with PeakRss() as mem:
            t0 = time.monotonic()
            sync.save(ck.model_state(model), {"epoch": 0, "step": i, "history": {}})
            saves.append(time.monotonic() - t0)
        peaks.append(mem.extra)
        model.train_on_batch(x, y)
    out["sync"] = {
        "save_seconds": round(min(saves), 3),
        "blocked_seconds": round(min(saves), 3),
        "peak_extra_mb": round(max(peaks) / MIB, 1),
    }
    latest = sync  # restored below: the background store's if there is one
    if hasattr(ck, "BackgroundWriter"):
        store = latest = ck.CheckpointStore(work / "async", keep=2)
        done: list[Any] = []  # SaveDone of each save: the writer's CPU time
        writer = ck.BackgroundWriter(on_saved=done.append)
        saves, blocked, peaks, steps_during, costs = [], [], [], [], []
        for i in range(repeats):
            with PeakRss() as mem:
                t0 = time.monotonic()
                writer.submit(store, ck.model_state(model), {"epoch": 0, "step": i})
                blocked.append(time.monotonic() - t0)
                n, t1 = 0, time.monotonic()
                while writer.busy():  # training goes on while the save is written
                    model.train_on_batch(x, y)
                    n += 1
                slower = time.monotonic() - t1 - n * step  # the writer competes for CPU
                writer.wait()
                saves.append(time.monotonic() - t0)
            peaks.append(mem.extra)
            steps_during.append(n)
            costs.append(blocked[-1] + max(0.0, slower))
        out["background"] = {
            "save_seconds": round(min(saves), 3),
            "blocked_seconds": round(min(blocked), 4),
            "peak_extra_mb": round(max(peaks) / MIB, 1),
            "steps_during_save": min(steps_during),
            "cost_to_training_seconds": round(min(costs), 3),
            "writer_cpu_seconds": round(min(d.cpu_seconds for d in done), 3),
        }
        out["auto"] = auto_interval(min(blocked) + min(d.cpu_seconds for d in done), min(costs))
    for name in ("sync", "background"):
        if name in out:
            cost = out[name].get("cost_to_training_seconds", out[name]["save_seconds"])
            out[name]["overhead_pct_every_50_steps"] = round(100 * cost / (50 * step), 2)
            out[name]["overhead_pct_every_60s"] = round(100 * cost / 60, 2)
    restores = []
    for _ in range(repeats):
        target = fresh()
        t0 = time.monotonic()
        found = latest.latest()
        assert found is not None
        ck.restore_state(target, found[0], ("model", "optimizer"))
        restores.append(time.monotonic() - t0)
        del found
    out["restore_seconds"] = round(min(restores), 3)
    return out


def auto_interval(estimated: float, measured: float) -> dict[str, Any]:
    """What `intervalSeconds: auto` chooses for this model: its cost estimate C (blocked
    + the writer's CPU time, what the trainer measures) beside the cost measured above,
    and per MTBF the interval and the expected waste per hour, also at the fixed 60 s."""
    import tuneop_contract as contract
    from tuneop_trainer.checkpoint import cadence

    out: dict[str, Any] = {
        "estimated_cost_seconds": round(estimated, 3),
        "measured_cost_seconds": round(measured, 3),
        "by_mtbf": {},
    }
    for hours in (1, 4, 24):
        mtbf = hours * 3600.0
        interval = cadence.optimal_interval(estimated, mtbf)
        out["by_mtbf"][f"{hours}h"] = {
            "interval_seconds": round(interval, 1),
            "waste_seconds_per_hour": round(
                contract.expected_waste_per_hour(interval, measured, mtbf), 2
            ),
            "waste_seconds_per_hour_at_60s": round(
                contract.expected_waste_per_hour(60.0, measured, mtbf), 2
            ),
        }
    return out


def manifest(samples: int, checkpoint: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "tuneop.io/v1alpha1",
        "kind": "TuningJob",
        "metadata": {"name": "bench-realsize"},
        "spec": {
            "hypermodel": "realsize_model:build",
            "pythonPath": [str(HERE)],
            "data": {"synthetic": {"samples": samples, "seed": 0}, "validationSplit": 0.2},
            "tuner": {
                "algorithm": "RandomSearch",
                "maxTrials": 1,
                "maxEpochs": EPOCHS,
                "seed": 3,
                "batchSize": 64,
            },
            "checkpoint": checkpoint,
        },
    }


EPOCHS = 3
EPOCH_LINE = re.compile(r"^(\S+ \S+) INFO \S+: \S+ trial \S+ fit 0 epoch (\d):")
STAMP = "%Y-%m-%d %H:%M:%S,%f"


def trainer(
    work: Path, name: str, samples: int, checkpoint: dict[str, Any]
) -> subprocess.Popen[str]:
    d = work / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    spec = d / "job.yaml"
    spec.write_text(yaml.safe_dump(manifest(samples, checkpoint)))
    env = bench_trainer.trainer_env(0)
    cmd = bench_trainer.command("tuneop", spec, d / "ckpt")
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


def epoch_seconds(text: str) -> list[float]:
    """Wall time of each epoch after the first (which traces): between epoch log lines."""
    stamps = {}
    for line in text.splitlines():
        m = EPOCH_LINE.match(line)
        if m:
            stamps[int(m.group(2))] = datetime.strptime(m.group(1), STAMP)
    if set(stamps) != set(range(1, EPOCHS + 1)):
        raise SystemExit(f"trainer log lacks the epoch lines:\n{text[-3000:]}")
    return [(stamps[e + 1] - stamps[e]).total_seconds() for e in range(1, EPOCHS)]


CONFIGS = {
    "epoch-end only": {"intervalSteps": 0, "intervalSeconds": 0},
    "every 50 steps": {"intervalSteps": 50},
}


def overhead(work: Path, samples: int, steps: int, repeats: int) -> dict[str, Any]:
    """Runs alternate between the two settings; each setting's fastest epoch counts
    (the least disturbed by the rest of the machine)."""
    runs: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for _ in range(repeats):
        for name, cp in CONFIGS.items():
            p = trainer(work, name.replace(" ", "-"), samples, cp)
            text, _ = p.communicate()
            if p.returncode != 0:
                raise SystemExit(f"trainer exited {p.returncode}:\n{text[-3000:]}")
            runs[name] += epoch_seconds(text)
    base, every50 = min(runs["epoch-end only"]), min(runs["every 50 steps"])
    saves = (steps - 1) // 50  # mid-epoch saves every 50 steps (60 s never due)
    per_save = (every50 - base) / saves if saves else 0.0
    return {
        "steps_per_epoch": steps,
        "epoch_seconds": {k: [round(v, 2) for v in vs] for k, vs in runs.items()},
        "epoch_seconds_epoch_end_only": round(base, 2),
        "epoch_seconds_every_50_steps": round(every50, 2),
        "mid_epoch_saves": saves,
        "overhead_pct_every_50_steps": round(100 * (every50 - base) / base, 2),
        "cost_per_save_seconds": round(per_save, 3),
        "overhead_pct_every_60s": round(100 * per_save / 60, 2),
    }


def sigterm(work: Path, samples: int) -> dict[str, Any]:
    p = trainer(work, "sigterm", samples, {})
    lines: list[str] = []
    assert p.stdout is not None
    for line in p.stdout:
        lines.append(line)
        if EPOCH_LINE.match(line):  # epoch 1 done: the second epoch is running
            break
    time.sleep(3.0)  # mid-epoch, likely with a periodic save in flight
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    rest, _ = p.communicate()
    seconds = time.monotonic() - t0
    # the trainer's own view: from its "SIGTERM received" line to its last log line
    stamped = [
        (datetime.strptime(" ".join(line.split()[:2]), STAMP), line)
        for line in rest.splitlines()
        if re.match(r"^\d{4}-\d\d-\d\d \S+ ", line)
    ]
    start = next((t for t, line in stamped if "SIGTERM received" in line), None)
    logged = None if start is None else (stamped[-1][0] - start).total_seconds()
    return {
        "exit_code": p.returncode,
        "sigterm_to_exit_seconds": round(seconds, 2),
        "sigterm_to_last_log_line_seconds": None if logged is None else round(logged, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="in-process saves/restores")
    parser.add_argument("--runs", type=int, default=2, help="trainer runs per setting")
    parser.add_argument("--steps", type=int, default=200, help="training steps per epoch")
    parser.add_argument("--work", default=None)
    parser.add_argument("--in-process-only", action="store_true", help="skip the trainer runs")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="tuneop-bench-ckpt-"))
    samples = int(args.steps * 64 / 0.8)
    report: dict[str, Any] = {"in_process": in_process(work, args.repeats)}
    if not args.in_process_only:
        report["overhead"] = overhead(work, samples, args.steps, args.runs)
        report["sigterm"] = sigterm(work, samples)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    ip = report["in_process"]
    print(
        f"\nreal-size checkpoint: {ip['params'] / 1e6:.1f} M params, state {ip['state_mb']} MB, "
        f"step {ip['step_seconds']}s"
    )
    print(
        f"{'writer':<12}{'save s':>8}{'blocked s':>11}{'cost s':>8}{'peak extra MB':>15}"
        f"{'% @50 steps':>13}{'% @60 s':>9}"
    )
    for name in ("sync", "background"):
        if name in ip:
            r = ip[name]
            cost = r.get("cost_to_training_seconds", r["save_seconds"])
            print(
                f"{name:<12}{r['save_seconds']:>8}{r['blocked_seconds']:>11}{cost:>8}"
                f"{r['peak_extra_mb']:>15}{r['overhead_pct_every_50_steps']:>13}"
                f"{r['overhead_pct_every_60s']:>9}"
            )
    print(f"restore (read + verify + assign): {ip['restore_seconds']} s")
    if "auto" in ip:
        auto = ip["auto"]
        print(
            f"intervalSeconds auto: cost estimate (blocked + writer CPU) "
            f"{auto['estimated_cost_seconds']} s, measured {auto['measured_cost_seconds']} s"
        )
        print(f"{'MTBF':<6}{'interval s':>12}{'waste s/h':>11}{'at 60 s':>9}")
        for mtbf, row in auto["by_mtbf"].items():
            print(
                f"{mtbf:<6}{row['interval_seconds']:>12}{row['waste_seconds_per_hour']:>11}"
                f"{row['waste_seconds_per_hour_at_60s']:>9}"
            )
    if "overhead" in report:
        ov, st = report["overhead"], report["sigterm"]
        print(
            f"end to end, fastest epoch, every 50 steps vs epoch-end only: "
            f"{ov['overhead_pct_every_50_steps']} % "
            f"({ov['mid_epoch_saves']} saves, {ov['cost_per_save_seconds']} s each); "
            f"at one save per 60 s (the default): {ov['overhead_pct_every_60s']} %"
        )
        print(
            f"SIGTERM to exit {st['exit_code']}: {st['sigterm_to_exit_seconds']} s (budget 15 s; "
            f"trainer log: SIGTERM line to last line {st['sigterm_to_last_log_line_seconds']} s)"
        )
    print(f"wrote {OUT.relative_to(REPO)}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
