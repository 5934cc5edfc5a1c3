"""Recovery benchmark (`make bench-recovery`): from an eviction to the trainer's next
training step, on a real node (a container of the CPU trainer image: container start,
TensorFlow import, restore) beside the node agent's host process (a fresh Python process:
TensorFlow import, restore) and the node agent as most of the suite runs it (a process
forked from one with TensorFlow imported: restore only), which is what that lane saves
per pod.

Each kind of node runs the sample job (more data, so that it outlasts the evictions) on
a fresh local cluster with the operator as a subprocess, and evicts the trainer
mid-epoch EVICTIONS times. Per eviction: the seconds from the Eviction API call to the
first answer of the new trainer's /progress endpoint (polled every 0.1 s at its pod IP)
that shows a training step past its restore point; and beside it the operator's own
`status.goodput.lastRecoverySeconds` (the old trainer's last step to the new one's
first, from the trainers' second-precision clocks).
Table on stdout, JSON in bench/results/recovery.json.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for sub in ("contract", "operator", "trainer_image", "."):
    sys.path.insert(0, str(ROOT / sub))

from bench.operator.cluster_run import cluster_with_operator  # noqa: E402
from tests.e2e.harness import (  # noqa: E402
    Kubectl,
    sample,
    trainer_progress,
    wait_for,
    wait_mid_epoch,
)
from tests.localcluster import disruption  # noqa: E402
from tests.localcluster.cluster import LocalCluster  # noqa: E402

NAME, NS = "emg-cnn", "default"
EVICTIONS = 5
SAMPLES = 4096  # 96 steps an epoch: long enough to be evicted mid-epoch five times
OUT = ROOT / "bench" / "results" / "recovery.json"


def trained_after_restore(kubectl: Kubectl, cluster: LocalCluster, old_uid: str) -> bool:
    """The new trainer pod has trained a step past where it resumed."""
    pod = cluster.pod(NS, f"{NAME}-worker-0")
    if pod is None or pod.metadata.uid == old_uid or not pod.status.pod_ip:
        return False
    p = trainer_progress(kubectl, NS, f"{NAME}-worker-0") or {}
    if p.get("phase") != "Running" or not p.get("trial_id"):
        return False
    start = (p.get("resumed_from_epoch") or 0, p.get("resumed_from_step") or 0)
    return (p.get("epoch", 0), p.get("step", 0)) > start


def evict_and_recover(
    kubectl: Kubectl, cluster: LocalCluster, steps: int, n: int
) -> tuple[float, float]:
    """Evict the trainer mid-epoch (the `n`-th time): seconds to its next step, as seen
    from here and as the operator computed it."""
    wait_mid_epoch(kubectl, NS, NAME, steps, timeout=600, any_trial=True)
    pod = cluster.pod(NS, f"{NAME}-worker-0")
    assert pod is not None
    evicted = time.monotonic()
    disruption.evict_pod(cluster.api, NS, f"{NAME}-worker-0")
    wait_for(lambda: trained_after_restore(kubectl, cluster, pod.metadata.uid), 300,
             f"training after eviction {n}", every=0.1)  # fmt: skip
    seen = time.monotonic() - evicted

    def operator_figure() -> float | None:
        status = (kubectl.job(NS, NAME) or {}).get("status") or {}
        seconds = (status.get("goodput") or {}).get("lastRecoverySeconds")
        recoveries = (status.get("goodput") or {}).get("recoveries", 0)
        return float(seconds) if recoveries >= n and seconds is not None else None

    return seen, wait_for(operator_figure, 120, f"recovery {n} in the status", every=0.5)


KINDS = ("node agent", "node agent, forked", "real node")


def measure(kind: str) -> list[tuple[float, float]]:
    real, forked = kind == "real node", kind == "node agent, forked"
    with cluster_with_operator(NS, real_node=real, fork_python=forked) as run:
        job = sample(NAME, NS, **run.spec)
        job["spec"]["data"]["synthetic"]["samples"] = SAMPLES
        run.kubectl.apply(job)
        steps = int(SAMPLES * (1 - job["spec"]["data"]["validationSplit"])) // 32
        return [
            evict_and_recover(run.kubectl, run.cluster, steps, n) for n in range(1, EVICTIONS + 1)
        ]


def main() -> int:
    rows = {}
    for kind in KINDS:
        figures = measure(kind)
        seen, operator = [f[0] for f in figures], [f[1] for f in figures]
        rows[kind] = {
            "evictions": len(figures),
            "p50": round(statistics.median(seen), 2),
            "max": round(max(seen), 2),
            "all": [round(s, 2) for s in seen],
            "operator_p50": statistics.median(operator),
            "operator_all": operator,
        }
    result = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "measure": "Eviction API call -> the new trainer's first step past its restore",
        "rows": rows,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'node':20} {'evictions':>9} {'p50 s':>7} {'max s':>7} {'operator p50 s':>15}")
    for kind, row in rows.items():
        print(f"{kind:20} {row['evictions']:>9} {row['p50']:>7} {row['max']:>7} "
              f"{row['operator_p50']:>15}")  # fmt: skip
    print(f"(JSON: {OUT})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
