"""Parallel-trials benchmark (`make bench-parallel`): what trial groups buy on this
machine, and what losing a trial group or the oracle costs.

The same search (RandomSearch, TinyCNN on synthetic EMG, deterministic, one CPU device
per process) run
  sequential   one `python -m tuneop_trainer run` (no oracle)
  1 group      an oracle process + one trial group (keras-tuner's distributed tuning)
  2 groups     an oracle process + two trial groups
Search time = from the first trial's start (the oracle's record) to results.json, so
process start-up (Python + TF import, paid by every process at once) is reported
apart; each clean configuration runs --repeat times, interleaved, and the fastest is
kept; CPU = user + system seconds of all the processes. Then, in a 2-group search:
  group loss   tuner1 SIGKILLed mid-trial and restarted at once: seconds from the kill to
               its first training step after the restart (its /metrics endpoint polled
               every 20 ms), and to its restore (log timestamp)
  oracle loss  the oracle SIGKILLed mid-search, kept away until both groups have ended
               their trial and wait for it, then restarted: seconds from the restart to
               serving again, to the next trial handed out (the oracle's record) and to
               a waiting group's call answered (its log); kill to the next step
               of a group is not measured: training never waits for the oracle
Both end with every trial run once (checked). Prints a table; writes
bench/results/parallel.json. Timings are noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from bench_trainer import free_port  # the same directory: run as a script
from bench_trainer import manifest as base_manifest

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "bench" / "results" / "parallel.json"
PYTHONPATH = os.pathsep.join(str(REPO / p) for p in ("contract", "operator", "trainer_image", "."))
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", re.M)


def manifest(samples: int, trials: int, epochs: int) -> dict[str, Any]:
    """bench_trainer's search with this benchmark's seed, batch size and objective, and
    a checkpoint every 10 steps."""
    doc = base_manifest(samples, trials, epochs, intervalSteps=10, intervalSeconds=0)
    doc["metadata"]["name"] = "bench-parallel"
    doc["spec"]["tuner"].update(
        seed=5, batchSize=8, objective={"name": "val_accuracy", "direction": "max"}
    )
    return doc


def log_time(line_match: str) -> float:
    """Epoch seconds of a trainer log line's timestamp (local time, ms precision)."""
    stamp = dt.datetime.strptime(line_match, "%Y-%m-%d %H:%M:%S,%f")
    return time.mktime(stamp.timetuple()) + stamp.microsecond / 1e6


def first_line_time(text: str, needle: str, after: float = 0.0) -> float | None:
    for line in text.splitlines():
        found = LOG_TIME.match(line)
        if found and needle in line:
            t = log_time(found[1])
            if t >= after:
                return t
    return None


class Run:
    """The processes of one search in `work` (checkpoints in work/ckpt)."""

    def __init__(self, work: Path, spec: Path, groups: int | None) -> None:
        self.work, self.spec, self.groups = work, spec, groups
        self.ckpt = work / "ckpt"
        self.port = free_port()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.metrics_ports: dict[str, int] = {}

    def start(self, name: str) -> None:
        e = dict(os.environ, PYTHONPATH=PYTHONPATH, TF_CPP_MIN_LOG_LEVEL="2")
        e["PYTHONUNBUFFERED"] = "1"
        port = free_port()
        self.metrics_ports[name] = port
        e.update(TUNEOP_METRICS_PORT=str(port), TUNEOP_METRICS_ADDRESS="127.0.0.1")
        if self.groups is not None:
            e.update(
                KERASTUNER_TUNER_ID=name,
                KERASTUNER_ORACLE_IP="127.0.0.1",
                KERASTUNER_ORACLE_PORT=str(self.port),
                TUNEOP_TRIAL_GROUPS=str(self.groups),
            )
        cmd = [sys.executable, "-m", "tuneop_trainer", "run", "--spec", str(self.spec)]
        cmd += ["--dir", str(self.ckpt)]
        log = (self.work / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=e)

    def names(self) -> list[str]:
        if self.groups is None:
            return ["sequential"]
        return ["chief"] + [f"tuner{g}" for g in range(self.groups)]

    def text(self, name: str) -> str:
        return (self.work / f"{name}.log").read_text(errors="replace")

    def steps(self, name: str) -> float:
        url = f"http://127.0.0.1:{self.metrics_ports[name]}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                body = resp.read().decode()
        except OSError:
            return -1.0
        found = re.search(r"^tuneop_trainer_steps_total (\S+)$", body, re.M)
        return float(found[1]) if found else -1.0

    def wait(self, timeout: float = 900) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        try:
            return {
                n: p.wait(timeout=max(1.0, deadline - time.monotonic()))
                for n, p in self.procs.items()
            }
        finally:
            for p in self.procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()

    def oracle_state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.ckpt / "tuner/search/oracle.json").read_text())
        return data

    def check_once(self, trials: int) -> bool:
        """Every trial ended once, none ongoing or queued, all COMPLETED."""
        state = self.oracle_state()
        res = json.loads((self.ckpt / "results.json").read_text())
        return (
            sorted(state["end_order"]) == sorted(t["trialId"] for t in res["trials"])
            and len(state["end_order"]) == trials
            and set(state["run_times"].values()) == {1}
            and not state["ongoing_trials"]
            and all(t["status"] == "COMPLETED" for t in res["trials"])
        )


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def search_seconds(run: Run, t_start: float) -> tuple[float, float]:
    """(start-up, search) seconds: until the first trial began (the oracle's record),
    then until results.json was written (every trial ended, the best model exported)."""
    display = run.oracle_state()["display"]["trial_start"]
    first = min(dt.datetime.fromisoformat(v).timestamp() for v in display.values())
    done = (run.ckpt / "results.json").stat().st_mtime
    return first - t_start, done - first


def clean(spec: Path, work: Path, groups: int | None, trials: int) -> dict[str, Any]:
    run = Run(work, spec, groups)
    cpu0, t0 = cpu_seconds(), time.time()
    for name in run.names():
        run.start(name)
    codes = run.wait()
    wall = time.time() - t0
    startup, search = search_seconds(run, t0)
    out = {
        "groups": groups,
        "wall_seconds": round(wall, 2),
        "startup_seconds": round(startup, 2),
        "search_seconds": round(search, 2),
        "cpu_seconds": round(cpu_seconds() - cpu0, 2),
        "exit_codes": codes,
    }
    if groups is not None:
        out["every_trial_once"] = run.check_once(trials)
    return out


def group_loss(spec: Path, work: Path, trials: int) -> dict[str, Any]:
    run = Run(work, spec, 2)
    for name in run.names():
        run.start(name)
    deadline = time.monotonic() + 300
    while run.steps("tuner1") < 15 and time.monotonic() < deadline:  # mid-trial
        time.sleep(0.02)
    t_kill = time.time()
    run.procs["tuner1"].kill()
    run.procs["tuner1"].wait()
    run.start("tuner1")
    while run.steps("tuner1") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    t_step = time.time()
    codes = run.wait()
    restored = first_line_time(run.text("tuner1"), "restored", after=t_kill)
    return {
        "kill_to_next_step_seconds": round(t_step - t_kill, 2),
        "kill_to_restore_seconds": round(restored - t_kill, 2) if restored else None,
        "resumed": bool(restored),
        "exit_codes": codes,
        "every_trial_once": run.check_once(trials),
    }


def oracle_loss(spec: Path, work: Path, trials: int, epochs: int) -> dict[str, Any]:
    run = Run(work, spec, 2)
    for name in run.names():
        run.start(name)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # two trials done, both groups in a trial
        try:
            if len(run.oracle_state()["end_order"]) >= 2:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    time.sleep(0.3)
    t_kill = time.time()
    run.procs["chief"].kill()
    run.procs["chief"].wait()
    # keep it away until both groups have finished their trial and wait for it
    last_epoch = f"epoch {epochs}/{epochs}:"
    while time.monotonic() < deadline:
        if all(
            first_line_time(run.text(g), last_epoch, after=t_kill) for g in ("tuner0", "tuner1")
        ):
            break
        time.sleep(0.05)
    t_restart = time.time()
    run.start("chief")
    codes = run.wait()
    serving = first_line_time(run.text("chief"), "oracle serving", after=t_restart)
    starts = run.oracle_state()["display"]["trial_start"].values()
    handed = [t for v in starts if (t := dt.datetime.fromisoformat(v).timestamp()) > t_restart]
    answered = [
        t
        for g in ("tuner0", "tuner1")
        if (t := first_line_time(run.text(g), ": answered after", after=t_restart))
    ]
    return {
        "outage_seconds": round(t_restart - t_kill, 2),
        "restart_to_serving_seconds": round(serving - t_restart, 2) if serving else None,
        "restart_to_next_trial_seconds": round(min(handed) - t_restart, 2) if handed else None,
        "restart_to_group_answered_seconds": (
            round(min(answered) - t_restart, 2) if answered else None
        ),
        "exit_codes": codes,
        "every_trial_once": run.check_once(trials),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="clean runs per config (best kept)")
    args = parser.parse_args()
    out: dict[str, Any] = {"config": vars(args), "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="tuneop-bench-parallel-") as tmp:
        root = Path(tmp)
        spec = root / "spec.yaml"
        spec.write_text(yaml.safe_dump(manifest(args.samples, args.trials, args.epochs)))
        for rep in range(args.repeat):  # interleaved, so load changes hit all alike
            for label, groups in (("sequential", None), ("1 group", 1), ("2 groups", 2)):
                work = root / f"{label.replace(' ', '-')}-{rep}"
                work.mkdir()
                result = clean(spec, work, groups, args.trials)
                print(f"{label} #{rep}: {result}", flush=True)
                best = out.get(label)
                if best is None or result["search_seconds"] < best["search_seconds"]:
                    out[label] = result  # the least disturbed run
                out.setdefault(f"{label} search_seconds all", []).append(result["search_seconds"])
        (root / "group-loss").mkdir()
        out["group loss"] = group_loss(spec, root / "group-loss", args.trials)
        print(f"group loss: {out['group loss']}", flush=True)
        (root / "oracle-loss").mkdir()
        out["oracle loss"] = oracle_loss(spec, root / "oracle-loss", args.trials, args.epochs)
        print(f"oracle loss: {out['oracle loss']}", flush=True)
    one, two = out["1 group"], out["2 groups"]
    out["speedup_2_vs_1_search"] = round(one["search_seconds"] / two["search_seconds"], 2)
    out["speedup_2_vs_1_wall"] = round(one["wall_seconds"] / two["wall_seconds"], 2)
    print()
    print(f"{'search':<12}{'wall s':>9}{'start-up s':>12}{'search s':>10}{'CPU s':>8}  once")
    for label in ("sequential", "1 group", "2 groups"):
        r = out[label]
        once = r.get("every_trial_once", "-")
        print(
            f"{label:<12}{r['wall_seconds']:>9}{r['startup_seconds']:>12}"
            f"{r['search_seconds']:>10}{r['cpu_seconds']:>8}  {once}"
        )
    print(
        f"2 groups vs 1: search time x{out['speedup_2_vs_1_search']}, "
        f"wall x{out['speedup_2_vs_1_wall']} on {out['cores']} cores"
    )
    g, o = out["group loss"], out["oracle loss"]
    print(
        f"group loss:  kill -> restore {g['kill_to_restore_seconds']} s, -> next training "
        f"step {g['kill_to_next_step_seconds']} s (every trial once: {g['every_trial_once']})"
    )
    print(
        f"oracle loss: away {o['outage_seconds']} s with both groups waiting; restarted -> "
        f"serving {o['restart_to_serving_seconds']} s, -> next trial handed out "
        f"{o['restart_to_next_trial_seconds']} s, -> a waiting group answered "
        f"{o['restart_to_group_answered_seconds']} s (every trial once: {o['every_trial_once']})"
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=2))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
