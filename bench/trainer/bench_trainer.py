"""Trainer benchmark (`make bench-trainer`): what a preemption costs.

The same tiny search (RandomSearch, TinyCNN on synthetic EMG, MirroredStrategy over 2
logical CPUs, deterministic) run by three programs, each once uninterrupted and once
SIGKILLed N times at the same points and restarted until it completes:
  tuneop        python -m tuneop_trainer run (this project)
  keras-tuner   plain keras-tuner, overwrite=False, restarted after each kill
  kt+backup     the same plus keras.callbacks.BackupAndRestore
  exec          the keras-tuner program itself (kt_baseline.py, unchanged) run by
                `python -m tuneop_trainer exec` (script mode): its overhead when nothing
                goes wrong is `exec` clean vs `keras-tuner` clean
Kill points: process i is SIGKILLed once it has run N_i training steps (--kill-after-steps,
default 130,170,110 with 100 steps per epoch: mid-epoch, off checkpoint boundaries),
polled every 20 ms, so every program is killed at the same amount of work whatever the
machine load. Work lost per preemption, in steps = (training steps run by all
processes - steps of the uninterrupted run) / kills, counted by tuneop's own Prometheus
endpoint (scraped just before the kill) and by a step-counting callback in the
baselines; in seconds = (search time of all processes - uninterrupted search time) /
kills, so it includes re-tracing and restore; start-up (Python + TF import, the same for
all) is excluded and reported separately. Timings are noisy on a shared machine.
Memory row (bench_memory.py): RSS over five epochs of a 320 MB numpy set, tuneop
`exec` vs plain Keras. Also: tuneop's checkpoint overhead at the default interval and
its restore time, and whether the interrupted tuneop search ended bit-identical to the
uninterrupted one.
Prints a table; writes bench/results/trainer.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import bench_memory
import yaml

from tests.localcluster.controlplane import free_port

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "bench" / "results" / "trainer.json"
HERE = Path(__file__).parent


def manifest(samples: int, trials: int, epochs: int, **checkpoint: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tuneop.io/v1alpha1",
        "kind": "TuningJob",
        "metadata": {"name": "bench"},
        "spec": {
            "hypermodel": "tuneop_trainer.examples.emg:TinyCNNHyperModel",
            "data": {"synthetic": {"samples": samples, "seed": 0}, "validationSplit": 0.2},
            "tuner": {
                "algorithm": "RandomSearch",
                "maxTrials": trials,
                "maxEpochs": epochs,
                "seed": 11,
                "batchSize": 32,
                "deterministic": True,
            },
            "checkpoint": checkpoint,
        },
    }


def trainer_env(metrics_port: int) -> dict[str, str]:
    """The environment of a trainer process run from the work tree (0: no metrics port)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(REPO / p) for p in ("contract", "trainer_image"))
    env["TUNEOP_METRICS_PORT"] = str(metrics_port)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Proc:
    """A subprocess whose output lines are timestamped as they arrive."""

    def __init__(self, cmd: list[str], log: Path, devices: int = 2) -> None:
        self.port = free_port()
        env = trainer_env(self.port)
        env["TUNEOP_LOGICAL_CPU_DEVICES"] = str(devices)
        env["TUNEOP_METRICS_ADDRESS"] = "127.0.0.1"
        self.steps_file = log.with_name(f"{log.stem}.steps")
        self.steps_file.unlink(missing_ok=True)
        if "kt_baseline.py" in " ".join(cmd):
            cmd = [*cmd, "--steps-file", str(self.steps_file)]
        self.start = time.monotonic()
        self.ready: float | None = None  # the "strategy:" line: Python + TF are up
        self.lines: list[str] = []
        self.log = log.open("a")
        self.p = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.log.write(line)
            self.lines.append(line)
            if self.ready is None and "strategy:" in line:
                self.ready = time.monotonic()

    def steps_now(self) -> int:
        """Steps run so far by this live process: tuneop's own Prometheus endpoint, or
        the baseline's step file."""
        try:
            url = f"http://127.0.0.1:{self.port}/metrics"
            with urllib.request.urlopen(url, timeout=2) as resp:
                text = resp.read().decode()
            m = re.search(r"^tuneop_trainer_steps_total ([\d.e+]+)$", text, re.M)
            if m:
                return int(float(m.group(1)))
        except OSError:
            pass
        try:
            return int(self.steps_file.read_text() or 0)
        except (OSError, ValueError):
            return 0

    def wait_steps(self, target: int) -> None:
        """Block until this process has run `target` training steps (or exited)."""
        while self.p.poll() is None and self.steps_now() < target:
            time.sleep(0.02)

    def steps_at_exit(self) -> int:
        """tuneop's own count if it printed one (under `exec` the script's callback
        count is restored across processes), else the baseline's."""
        text = "".join(self.lines)
        m = re.search(r"\((\d+) steps in this process\)", text) or re.search(
            r"^STEPS (\d+)$", text, re.M
        )
        return int(m.group(1)) if m else 0

    def wait(self) -> tuple[int, float]:
        code = self.p.wait()
        self.reader.join()
        self.log.close()
        return code, time.monotonic() - self.start


def command(variant: str, spec: Path, ckpt: Path) -> list[str]:
    if variant == "tuneop":
        return [
            sys.executable,
            "-m",
            "tuneop_trainer",
            "run",
            "--spec",
            str(spec),
            "--dir",
            str(ckpt),
        ]
    cmd = [sys.executable, str(HERE / "kt_baseline.py"), "--spec", str(spec), "--dir", str(ckpt)]
    if variant == "exec":
        trainer = [sys.executable, "-m", "tuneop_trainer", "exec", "--dir", str(ckpt)]
        return [*trainer, "--spec", str(spec), "--deterministic", *cmd[1:]]
    return [*cmd, "--backup"] if variant == "kt+backup" else cmd


def run_variant(variant: str, spec: Path, work: Path, kill_steps: list[int]) -> dict[str, Any]:
    log = work / f"{variant}.log"
    # Uninterrupted.
    proc = Proc(command(variant, spec, work / f"{variant}-clean"), log)
    code, wall = proc.wait()
    assert code == 0, f"{variant} failed, see {log}"
    steps0 = proc.steps_at_exit()
    startup0 = (proc.ready or proc.start) - proc.start
    search0 = wall - startup0
    clean_lines = proc.lines
    # Interrupted: kill process i once it has run kill_steps[i] steps, then finish.
    ckpt = work / f"{variant}-killed"
    walls, startups, kill_codes, steps_run = [], [], [], []
    for target in kill_steps:
        proc = Proc(command(variant, spec, ckpt), log)
        proc.wait_steps(target)
        if proc.p.poll() is None:
            steps_run.append(proc.steps_now())
            proc.p.send_signal(signal.SIGKILL)
        else:
            steps_run.append(proc.steps_at_exit())
        code, w = proc.wait()
        kill_codes.append(code)
        walls.append(w)
        startups.append((proc.ready or proc.start) - proc.start)
    proc = Proc(command(variant, spec, ckpt), log)
    code, w = proc.wait()
    assert code == 0, f"{variant} (resumed) failed, see {log}"
    walls.append(w)
    startups.append((proc.ready or proc.start) - proc.start)
    steps_run.append(proc.steps_at_exit())
    killed = sum(1 for c in kill_codes if c == -signal.SIGKILL)
    search_total = sum(walls) - sum(startups)
    lost = (search_total - search0) / killed if killed else 0.0
    result: dict[str, Any] = {
        "variant": variant,
        "uninterruptedWallSeconds": round(wall, 2),
        "uninterruptedSearchSeconds": round(search0, 2),
        "startupSeconds": round(sum(startups) / len(startups), 2),
        "kills": killed,
        "interruptedWallSeconds": round(sum(walls), 2),
        "lostSecondsPerPreemption": round(lost, 2),
        "uninterruptedSteps": steps0,
        "stepsRunPerProcess": steps_run,
        "lostStepsPerPreemption": round((sum(steps_run) - steps0) / killed) if killed else 0,
    }
    if variant == "tuneop":
        result.update(tuneop_details(clean_lines, proc.lines, work, ckpt))
    if variant == "exec":
        result.update(exec_details(work, ckpt))
    return result


def exec_details(work: Path, ckpt: Path) -> dict[str, Any]:
    """Did the interrupted script-mode search end as the uninterrupted one?"""
    clean = json.loads((work / "exec-clean" / "results.json").read_text())
    killed = json.loads((ckpt / "results.json").read_text())
    return {
        "sameTrialsAndScores": [(t["trialId"], t["score"]) for t in clean["trials"]]
        == [(t["trialId"], t["score"]) for t in killed["trials"]]
    }


def tuneop_details(
    clean: list[str], resumed_log: list[str], work: Path, ckpt: Path
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    text = (work / "tuneop.log").read_text()
    m = re.search(
        r"checkpoints: (\d+) written in ([\d.]+)s = ([\d.]+)% overhead on ([\d.]+)s", "".join(clean)
    )
    if m:
        out["checkpointsWritten"] = int(m.group(1))
        out["checkpointOverheadPercent"] = float(m.group(3))
        out["checkpointSecondsEach"] = round(float(m.group(2)) / max(1, int(m.group(1))), 4)
    restores = [
        float(x) for x in re.findall(r"restored ckpt-\d+ at epoch \d+ step \d+ in ([\d.]+)s", text)
    ]
    out["restores"] = len(restores)
    out["restoreSeconds"] = round(sum(restores) / len(restores), 3) if restores else None
    clean_res = json.loads((work / "tuneop-clean" / "results.json").read_text())
    killed_res = json.loads((ckpt / "results.json").read_text())
    out["sameTrialsAndScores"] = [(t["trialId"], t["score"]) for t in clean_res["trials"]] == [
        (t["trialId"], t["score"]) for t in killed_res["trials"]
    ]
    out["bitIdenticalBestWeights"] = (
        clean_res["best"]["weightsSha256"] == killed_res["best"]["weightsSha256"]
    )
    return out


def overhead_at(interval_steps: int, args: argparse.Namespace, work: Path) -> float | None:
    spec = work / f"spec-{interval_steps}.yaml"
    spec.write_text(
        yaml.safe_dump(
            manifest(args.samples, args.trials, args.epochs, intervalSteps=interval_steps)
        )
    )
    proc = Proc(command("tuneop", spec, work / f"overhead-{interval_steps}"), work / "overhead.log")
    proc.wait()
    m = re.search(r"= ([\d.]+)% overhead", "".join(proc.lines))
    return float(m.group(1)) if m else None


def sigterm_exit(spec: Path, work: Path, after_steps: int) -> dict[str, Any]:
    """Seconds from SIGTERM (mid-training) to exit: the grace period a pod needs."""
    proc = Proc(command("tuneop", spec, work / "sigterm"), work / "sigterm.log")
    proc.wait_steps(after_steps)
    sent = time.monotonic()
    proc.p.send_signal(signal.SIGTERM)
    code = proc.p.wait()
    seconds = time.monotonic() - sent
    proc.wait()
    return {"exitCode": code, "secondsToExit": round(seconds, 3), "afterSteps": after_steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument(
        "--kill-after-steps",
        default="130,170,110",
        help="kill process i once it has run this many training steps (comma list)",
    )
    parser.add_argument("--variants", default="tuneop,exec,keras-tuner,kt+backup")
    parser.add_argument("--work", default=None, help="keep the work dir here")
    parser.add_argument(
        "--memory-mb", type=int, default=320, help="numpy set of the memory row (0: skip)"
    )
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-trainer-"))
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "spec.yaml"
    # Every 50 steps (and 60 s): this tiny model never reaches the 60 s default, and the
    # comparison is of what a kill loses between checkpoints.
    spec.write_text(
        yaml.safe_dump(manifest(args.samples, args.trials, args.epochs, intervalSteps=50))
    )
    train = int(args.samples * 0.8)
    steps = (train // 32) * args.epochs * args.trials
    rows = []
    for variant in args.variants.split(","):
        print(f"running {variant} ...", file=sys.stderr, flush=True)
        kill_steps = [int(n) for n in args.kill_after_steps.split(",")]
        rows.append(run_variant(variant, spec, work, kill_steps))
    tuneop = next((r for r in rows if r["variant"] == "tuneop"), None)
    if tuneop is not None:
        tuneop["checkpointOverheadPercentEvery10Steps"] = overhead_at(10, args, work)
        tuneop["sigterm"] = sigterm_exit(spec, work, 130)
    memory = bench_memory.bench(args.memory_mb, work) if args.memory_mb else []
    report = {
        "memory": memory,
        "search": {
            "algorithm": "RandomSearch",
            "trials": args.trials,
            "epochs": args.epochs,
            "trainSamples": train,
            "batchSize": 32,
            "totalSteps": steps,
            "strategy": "MirroredStrategy over 2 logical CPU devices",
            "killAfterStepsPerProcess": args.kill_after_steps,
        },
        "machine": {"cpus": os.cpu_count()},
        "results": rows,
        "workDir": str(work),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    cols = [
        ("variant", "variant", 12),
        ("clean s", "uninterruptedWallSeconds", 8),
        ("killed s", "interruptedWallSeconds", 9),
        ("kills", "kills", 5),
        ("lost s/kill", "lostSecondsPerPreemption", 11),
        ("lost steps/kill", "lostStepsPerPreemption", 15),
        ("startup s", "startupSeconds", 9),
    ]
    print(" ".join(f"{name:>{width}}" for name, _, width in cols))
    for r in rows:
        print(" ".join(f"{r[key]!s:>{width}}" for _, key, width in cols))
    if tuneop is not None:
        t = tuneop
        print(
            f"tuneop: checkpoint overhead {t.get('checkpointOverheadPercent')}% every 50 steps "
            f"(and 60 s), {t.get('checkpointOverheadPercentEvery10Steps')}% "
            f"every 10 steps; restore {t.get('restoreSeconds')} s; bit-identical best weights "
            f"after kills: {t.get('bitIdenticalBestWeights')}; SIGTERM to exit "
            f"{t['sigterm']['exitCode']} in {t['sigterm']['secondsToExit']} s"
        )
    by_name = {r["variant"]: r for r in rows}
    if "exec" in by_name and "keras-tuner" in by_name:
        e, k = by_name["exec"], by_name["keras-tuner"]
        overhead = 100 * (e["uninterruptedSearchSeconds"] / k["uninterruptedSearchSeconds"] - 1)
        by_name["exec"]["overheadPercentVsKerasTuner"] = round(overhead, 1)
        OUT.write_text(json.dumps(report, indent=2) + "\n")
        print(
            f"exec (script mode): {overhead:+.1f}% search time vs plain keras-tuner when "
            f"nothing goes wrong; same trials and scores after kills: "
            f"{e.get('sameTrialsAndScores')}"
        )
    bench_memory.print_rows(memory)
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
