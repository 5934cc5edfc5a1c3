"""Chaos soak (`make chaos`): a seeded mix of TuningJobs under a seeded schedule of
overlapping faults on the local cluster, every job checked against the invariants.

The local cluster as the e2e fixtures start it (the real control plane, node agents
running the trainers forked from a TensorFlow-imported server, local-path volumes),
here with `--nodes` nodes of 4 GPUs; Kueue's manager on its control plane as the
`kueue` fixture starts it (tests/localcluster/kueue.py; `--no-kueue`: none, the Kueue
faults are skipped); two operator replicas peering; then bench/chaos/core.py: jobs per
slot, faults from bench/chaos/schedule.py, invariants from bench/chaos/invariants.py.
Fault matrix on stdout, JSON in bench/results/chaos.json; exit status 1 if any
invariant was broken."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for sub in ("contract", "operator", "trainer_image", "client", "."):
    sys.path.insert(0, str(ROOT / sub))

from bench.chaos import matrix  # noqa: E402
from bench.chaos.core import Soak, SoakConfig  # noqa: E402
from bench.chaos.schedule import Limits  # noqa: E402
from tests.e2e.harness import Kubectl  # noqa: E402
from tests.localcluster import tools  # noqa: E402
from tests.localcluster.cluster import LocalCluster  # noqa: E402
from tests.localcluster.controlplane import ControlPlane  # noqa: E402
from tests.localcluster.kueue import Kueue  # noqa: E402
from tests.localcluster.nodeagent.agent import NodeConfig  # noqa: E402

OUT = ROOT / "bench" / "results" / "chaos.json"


def soak(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    cp = ControlPlane(work / "controlplane")
    cluster: LocalCluster | None = None
    kueue: Kueue | None = None
    try:
        cp.start()
        nodes = [NodeConfig(name=f"chaos-node-{i}", gpus=4) for i in range(args.nodes)]
        cluster = LocalCluster(cp, work / "cluster", nodes=nodes, fork_python=True)
        cluster.start()
        kubectl = Kubectl(cp.bin_dir / "kubectl", cp.kubeconfig)
        kubectl.install_crds()
        if args.kueue:
            kueue = Kueue(cp, kueue_dir=tools.kueue_dir(build=True))
            kueue.start()
        config = SoakConfig(duration=args.duration, seed=args.seed, jobs=args.jobs,
                            max_faults=args.max_faults,
                            burst_gap=tuple(args.burst_gap))  # fmt: skip
        result = Soak(cluster, kubectl, work, config, kueue).run()
        result["control_plane_restarts"] = cp.restarts  # components that exited on their own
        return result
    finally:
        if kueue is not None:
            kueue.stop()  # its webhooks first: none may refuse the clean-up's pod updates
        if cluster is not None:
            cluster.stop()
        cp.stop()


def report(result: dict[str, Any]) -> None:
    print(matrix.table(result.get("matrix") or []))
    violations = result.get("violations") or []
    print(
        f"\nseed {result.get('seed')}: {len(result.get('faults') or [])} faults "
        f"({result.get('overlapping')} overlapping), {len(result.get('jobs') or [])} jobs, "
        f"{len(violations)} violation(s); not built: {', '.join(result.get('not_built') or [])}"
    )
    fired = [f"{a['alert']} {a['namespace']}".strip() for a in result.get("alerts_fired") or []]
    print(f"alerts: {result.get('alerts_scrapes', 0)} scrapes, fired: {', '.join(fired) or 'none'}")
    if result.get("control_plane_restarts"):
        print(f"control plane components started again: {result['control_plane_restarts']}")
    for v in violations:
        print(f"  {v['invariant']:14} {v['namespace']:14} {v['job_kind']:12} {v['detail']}")
    print(f"(JSON: {OUT})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=900.0, help="s of faults and jobs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=6, help="job slots running at once")
    parser.add_argument("--nodes", type=int, default=3, help="node agents of 4 GPUs")
    parser.add_argument("--max-faults", type=int, default=400)
    parser.add_argument(
        "--burst-gap",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        default=list(Limits.burst_gap),
        help="s between bursts of faults, drawn in [LOW, HIGH]: the fault rate",
    )
    parser.add_argument(
        "--no-kueue",
        dest="kueue",
        action="store_false",
        help="no Kueue: queued jobs run unqueued, the Kueue faults are skipped",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the clean-up still runs
    work = Path(tempfile.mkdtemp(prefix="tuneop-chaos-"))
    started = time.monotonic()
    result: dict[str, Any] = {}
    try:
        result = soak(args, work)
    finally:
        result["when"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        result["args"] = vars(args)
        result["seconds_in_all"] = round(time.monotonic() - started, 1)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(result, indent=2, default=str) + "\n")
        if args.keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(result)
    return 1 if result.get("violations") else 0


if __name__ == "__main__":
    sys.exit(main())
