"""Memory row of `make bench-trainer`: resident memory over five epochs of a large numpy
training set (tests/trainer/scripts/memory_fit.py: MEMORY_MB of float32, batch 8192, a
one-layer model), run by `python -m tuneop_trainer exec` and by plain Python (Keras's
own `fit` over the same arrays, the reference). Growth = RSS at each epoch end minus RSS
right before the fit; a per-epoch copy of the set shows as about the set's size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "trainer" / "scripts" / "memory_fit.py"


def run(variant: str, data_mb: int, work: Path) -> dict[str, Any]:
    out = work / f"memory-{variant}.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(REPO / p) for p in ("contract", "trainer_image"))
    env.update(MEMORY_OUT=str(out), MEMORY_MB=str(data_mb), TF_CPP_MIN_LOG_LEVEL="2")
    env["TUNEOP_LOGICAL_CPU_DEVICES"] = "1"
    env["TUNEOP_METRICS_PORT"] = "0"
    if variant == "exec":
        ckpt = work / "memory-ckpt"
        cmd = [sys.executable, "-m", "tuneop_trainer", "exec", "--dir", str(ckpt)]
        cmd += ["--deterministic", str(SCRIPT)]
    else:
        cmd = [sys.executable, str(SCRIPT)]
    log = work / f"memory-{variant}.log"
    with log.open("w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=work).returncode
    if code != 0:
        raise RuntimeError(f"{variant}: exit {code}, see {log}")
    record = json.loads(out.read_text())
    growth = [round(mb - record["beforeMB"], 1) for mb in record["epochsMB"]]
    return {
        "variant": variant,
        "dataMB": round(record["dataMB"]),
        "rssBeforeFitMB": round(record["beforeMB"]),
        "growthPerEpochEndMB": growth,
        "maxGrowthMB": max(growth),
    }


def bench(data_mb: int, work: Path) -> list[dict[str, Any]]:
    return [run(variant, data_mb, work) for variant in ("exec", "keras")]


def print_rows(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        print(
            f"memory ({r['variant']}): {r['dataMB']} MB numpy set, RSS before the fit "
            f"{r['rssBeforeFitMB']} MB, growth at the 5 epoch ends {r['growthPerEpochEndMB']} MB"
        )


if __name__ == "__main__":
    rows = bench(int(sys.argv[1]) if len(sys.argv) > 1 else 320, Path(tempfile.mkdtemp()))
    print(json.dumps(rows, indent=2))
