"""Timings of the local cluster (test infrastructure benchmark, not a test).

    python -m tests.localcluster.nodeagent.bench [--pods 5] [--json out.json]

Starts its own control plane + one node agent in a temp dir and measures: cluster
start (control plane ready, node Ready), pod create → container running, create →
Succeeded for a one-line Python pod, graceful delete → pod gone, and ``kubectl logs``.
Medians over ``--pods`` pods, printed as a table and optionally written as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.localcluster.cluster import LocalCluster
from tests.localcluster.controlplane import ControlPlane


def _pod(name: str, script: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "x", "command": ["python", "-c", script]}],
        },
    }


def run(pods: int) -> dict[str, float]:
    results: dict[str, list[float]] = {}

    def record(key: str, seconds: float) -> None:
        results.setdefault(key, []).append(seconds)

    with tempfile.TemporaryDirectory(prefix="tuneop-bench-") as tmp:
        t0 = time.monotonic()
        cp = ControlPlane(Path(tmp) / "cp")
        cp.start()
        record("control_plane_start_seconds", time.monotonic() - t0)
        t1 = time.monotonic()
        cluster = LocalCluster(cp, Path(tmp) / "cluster")
        try:
            cluster.start()
            record("nodes_ready_seconds", time.monotonic() - t1)
            ns = "default"
            sleeper = "import time\nprint('up', flush=True)\nwhile True: time.sleep(0.1)"
            for i in range(pods):
                name = f"run-{i}"
                start = time.monotonic()
                cluster.core.create_namespaced_pod(ns, _pod(name, sleeper))
                cluster.wait_for_pod_running(ns, name)
                record("pod_create_to_running_seconds", time.monotonic() - start)
                cluster.wait_for_log(ns, name, "up", 30)
                start = time.monotonic()
                cluster.logs(ns, name)
                record("kubectl_logs_seconds", time.monotonic() - start)
                start = time.monotonic()
                cluster.core.delete_namespaced_pod(name, ns)
                cluster.wait_for_pod_gone(ns, name)
                record("graceful_delete_to_gone_seconds", time.monotonic() - start)
                name = f"once-{i}"
                start = time.monotonic()
                cluster.core.create_namespaced_pod(ns, _pod(name, "print('hi')"))
                cluster.wait_for_pod_phase(ns, name, "Succeeded")
                record("pod_create_to_succeeded_seconds", time.monotonic() - start)
                cluster.core.delete_namespaced_pod(name, ns)
        finally:
            cluster.stop()
            cp.stop()
    return {key: round(statistics.median(values), 3) for key, values in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    medians = run(args.pods)
    for key, value in medians.items():
        print(f"{key:40s} {value:8.3f}")
    if args.json:
        args.json.write_text(json.dumps(medians, indent=2) + "\n")


if __name__ == "__main__":
    main()
