"""Elastic resume benchmark (`make bench-elastic`): a search whose capacity drops from 2
devices to 1 for a third of its run.

The search of bench_trainer.py (RandomSearch, TinyCNN on synthetic EMG, batch 32,
deterministic) is run three ways, each a sequence of real trainer processes:
  uninterrupted  on 2 devices, start to end: its search time T
  wait           on 2 devices; SIGTERMed (a preemption, checkpointed) once it has run a
                 third of the steps; nothing runs for T/3 (the 2-device shape is gone and
                 the job waits for it, as a TuningJob without elastic shapes does); then
                 on 2 devices to the end
  elastic        the same preemption; at once on 1 device (the shape that is free) for
                 T/3; SIGTERMed there (the full shape is back); then on 2 devices to the end
Reported: time to finish from the first start, the difference of the results from the
uninterrupted run's (best trial, its score, the largest relative weight difference over
the trials' final models), and the steps each process trained (a SIGTERMed process's
as read just before the signal: it finishes the step it is in, so a count may be one
short). Each process is pinned to as many cores as it has devices (`taskset`): 2 cores
for the full shape, 1 for the smaller one, a stand-in for half the GPUs. TinyCNN has
Dropout, whose masks are drawn per replica: the elastic run's
weights drift from the uninterrupted run's by more than rounding (the wait run is
bit-identical). On this CPU machine the 2
logical devices share 2 cores; see below for how the smaller shape is given half of
them. Measured here (tiny model, MirroredStrategy over 2 CPU devices): the 1-device
shape pinned to 1 core trains about twice as fast as the 2-device one on 2 cores (the
strategy's overhead dominates so small a model), so the finish time flatters elastic
beyond what GPUs would show; what carries over is that the gap is not spent idle.
Prints a table; writes bench/results/elastic.json.
"""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from bench_trainer import REPO, Proc, command, manifest

OUT = REPO / "bench" / "results" / "elastic.json"


def run_until(spec: Path, ckpt: Path, log: Path, devices: int, stop: Any) -> tuple[Proc, int]:
    """A trainer on `devices`, SIGTERMed once `stop(proc)` holds (None: to the end);
    the process and the steps it trained."""
    # The shape's hardware: as many cores as devices (logical CPU devices alone would
    # share both cores, and 1 device would train as fast as 2).
    cores = ["taskset", "-c", ",".join(str(c) for c in range(devices))]
    proc = Proc([*cores, *command("tuneop", spec, ckpt)], log, devices=devices)
    steps = 0
    while stop is not None and proc.p.poll() is None and not stop(proc):
        time.sleep(0.02)
    if proc.p.poll() is None and stop is not None:
        steps = proc.steps_now()
        proc.p.send_signal(signal.SIGTERM)
    code, _ = proc.wait()
    assert code in (0, 75), f"exit {code}, see {log}"
    return proc, proc.steps_at_exit() or steps


def weights(ckpt: Path) -> dict[str, list[np.ndarray]]:
    out = {}
    for fit in sorted((ckpt / "trials").glob("*/*/fit-0")):
        latest = sorted(fit.glob("ckpt-*"))[-1]
        with np.load(latest / "state.npz") as state:
            out[fit.parent.name] = [state[k] for k in state.files if k.startswith("model/")]
    return out


def difference(ckpt: Path, reference: Path) -> dict[str, Any]:
    got = json.loads((ckpt / "results.json").read_text())
    ref = json.loads((reference / "results.json").read_text())
    a, b = weights(ckpt), weights(reference)
    worst = max(
        float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-12))
        for trial in b
        for x, y in zip(a[trial], b[trial], strict=True)
    )
    return {
        "sameBestTrial": got["best"]["trialId"] == ref["best"]["trialId"],
        "bestScoreDifference": abs(got["best"]["score"] - ref["best"]["score"]),
        "sameTrialsAndScores": [(t["trialId"], t["score"]) for t in got["trials"]]
        == [(t["trialId"], t["score"]) for t in ref["trials"]],
        "maxRelativeWeightDifference": worst,
    }


def interrupted(
    spec: Path, work: Path, name: str, third: int, gap: float, elastic: bool
) -> dict[str, Any]:
    ckpt, log = work / name, work / f"{name}.log"
    t0 = time.monotonic()
    steps = [run_until(spec, ckpt, log, 2, lambda p: p.steps_now() >= third)[1]]
    if elastic:
        start = time.monotonic()
        steps.append(run_until(spec, ckpt, log, 1, lambda p: time.monotonic() - start >= gap)[1])
    else:
        time.sleep(gap)
    steps.append(run_until(spec, ckpt, log, 2, None)[1])
    return {"variant": name, "finishSeconds": round(time.monotonic() - t0, 2), "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=24000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-elastic-") as tmp:
        work = Path(tmp)
        spec = work / "job.yaml"
        checkpoint = {"intervalSteps": 25, "intervalSeconds": 0, "keep": 2}
        job = manifest(args.samples, args.trials, args.epochs, **checkpoint)
        spec.write_text(yaml.safe_dump(job))
        print("running uninterrupted ...", flush=True)
        t0 = time.monotonic()
        clean, total_steps = run_until(spec, work / "clean", work / "clean.log", 2, None)
        search = time.monotonic() - t0 - ((clean.ready or clean.start) - clean.start)
        rows = [{"variant": "uninterrupted", "finishSeconds": round(time.monotonic() - t0, 2),
                 "steps": [total_steps]}]  # fmt: skip
        gap = search / 3
        for name, elastic in (("wait", False), ("elastic", True)):
            print(f"running {name} ...", flush=True)
            row = interrupted(spec, work, name, total_steps // 3, gap, elastic)
            row.update(difference(work / name, work / "clean"))
            rows.append(row)
    print(f"{'variant':>14} {'finish s':>9} {'steps per process':>22} {'same best':>9} "
          f"{'score diff':>10} {'max rel weight diff':>19}")  # fmt: skip
    for r in rows:
        print(
            f"{r['variant']:>14} {r['finishSeconds']:>9} {r['steps']!s:>22} "
            f"{r.get('sameBestTrial', '-')!s:>9} {r.get('bestScoreDifference', '-')!s:>10} "
            f"{r.get('maxRelativeWeightDifference', '-')!s:>19}"
        )
    wait, elastic = rows[1]["finishSeconds"], rows[2]["finishSeconds"]
    print(
        f"capacity gone for {gap:.1f}s (a third of the {search:.1f}s search): elastic "
        f"finished {wait - elastic:.1f}s sooner than waiting for the full shape"
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"gapSeconds": round(gap, 2), "rows": rows}, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
