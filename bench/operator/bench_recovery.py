"""Recovery benchmark (`make bench-recovery`): from an eviction to the trainer's next
training step, on a real node (a container of the CPU trainer image: container start,
TensorFlow import, restore) beside the node agent's host process it replaces in most of
the suite (a fresh Python process: TensorFlow import, restore).

Each kind of node runs the sample job (more data, so that it outlasts the evictions) on
a fresh local cluster with the operator as a subprocess, and evicts the trainer
mid-epoch EVICTIONS times. The figure per eviction is the operator's own
`status.goodput.lastRecoverySeconds` (the preempted trainer's last step to the new
trainer's first, from their own clocks), read once the restore is counted.
Table on stdout, JSON in bench/results/recovery.json.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for sub in ("contract", "operator", "trainer_image", "."):
    sys.path.insert(0, str(ROOT / sub))

from hack.images import built_archive, image_tag  # noqa: E402
from tests.e2e.harness import Kubectl, Operator, sample, wait_for, wait_mid_epoch  # noqa: E402
from tests.localcluster import disruption  # noqa: E402
from tests.localcluster.cluster import LocalCluster  # noqa: E402
from tests.localcluster.controlplane import ControlPlane  # noqa: E402
from tests.localcluster.kubelet.node import RealNodeConfig  # noqa: E402

NAME, NS = "emg-cnn", "default"
EVICTIONS = 5
SAMPLES = 4096  # 96 steps an epoch: long enough to be evicted mid-epoch five times
OUT = ROOT / "bench" / "results" / "recovery.json"


def start(kind: str, work: Path, cp: ControlPlane) -> tuple[LocalCluster, dict[str, Any]]:
    """A cluster with one node of `kind`; the spec fields its job needs."""
    cp.start()
    if kind == "node agent":
        cluster = LocalCluster(cp, work / "cluster")  # fork_python off: a real start
        cluster.start()
        return cluster, {}
    cluster = LocalCluster(cp, work / "cluster", nodes=[])
    cluster.start()
    images = dict(built_archive(name) for name in ("trainer-cpu", "pause"))
    cluster.add_real_node(RealNodeConfig(name="gpu-node-0", images=images, taints=[]))
    return cluster, {"image": f"tuneop/trainer:{image_tag()}-cpu"}


def evict_and_recover(kubectl: Kubectl, cluster: LocalCluster, steps: int, n: int) -> float:
    """Evict the trainer mid-epoch (the `n`-th time); seconds to its next step."""
    wait_mid_epoch(kubectl, NS, NAME, steps, timeout=600, any_trial=True)
    disruption.evict_pod(cluster.api, NS, f"{NAME}-worker-0")

    def recovered() -> float | None:
        status = (kubectl.job(NS, NAME) or {}).get("status") or {}
        seconds = (status.get("goodput") or {}).get("lastRecoverySeconds")
        return float(seconds) if status.get("restores", 0) >= n and seconds else None

    return wait_for(recovered, 300, f"restore {n}", every=0.5)


def measure(kind: str) -> list[float]:
    work = Path(tempfile.mkdtemp(prefix="tuneop-bench-recovery-"))
    cp = ControlPlane(work / "controlplane")
    cluster: LocalCluster | None = None
    operator: Operator | None = None
    try:
        cluster, spec = start(kind, work, cp)
        kubectl = Kubectl(cp.bin_dir / "kubectl", cp.kubeconfig)
        kubectl.install_crds()
        operator = Operator(cp.kubeconfig, work / "operator.log").start()
        wait_for(
            lambda: kubectl("get", "cm", "kube-root-ca.crt", "-n", NS, check=False).returncode == 0,
            60,
            "kube-root-ca.crt",
        )
        job = sample(NAME, NS, **spec)
        job["spec"]["data"]["synthetic"]["samples"] = SAMPLES
        kubectl.apply(job)
        steps = int(SAMPLES * (1 - job["spec"]["data"]["validationSplit"])) // 32
        return [evict_and_recover(kubectl, cluster, steps, n) for n in range(1, EVICTIONS + 1)]
    finally:
        if operator is not None:
            operator.stop()
        if cluster is not None:
            cluster.stop()
        cp.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    rows = {}
    for kind in ("node agent", "real node"):
        seconds = measure(kind)
        rows[kind] = {
            "evictions": len(seconds),
            "p50": round(statistics.median(seconds), 2),
            "max": round(max(seconds), 2),
            "all": [round(s, 2) for s in seconds],
        }
    result = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "measure": "eviction -> the trainer's next training step (status.goodput)",
        "rows": rows,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'node':12} {'evictions':>9} {'p50 s':>7} {'max s':>7}")
    for kind, row in rows.items():
        print(f"{kind:12} {row['evictions']:>9} {row['p50']:>7} {row['max']:>7}")
    print(f"(JSON: {OUT})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
