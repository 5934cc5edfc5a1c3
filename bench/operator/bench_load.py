"""Operator load benchmark (`make bench-operator`): what 1,000 TuningJobs cost the API
server and the operator.

A fresh local cluster (real control plane, node agent) whose pods run the stand-in
trainer (tests/localcluster/standin_trainer.py: the progress contract without
TensorFlow), the operator as a subprocess at its defaults (a job's passes at its events
and deadlines). Jobs: `--active` running ones (a long stand-in search, reporting like
the real trainer), a few finished ones, the rest suspended (idle: no pod). Measured:
- API requests per second at steady state, from kube-apiserver's own
  `apiserver_request_total` (all clients: the operator, the node agent, the stand-ins,
  the controllers), by verb and resource, with `--small` idle jobs and with `--jobs`;
- reconcile latency after a pod change: a running job's pod is evicted; from the moment
  a pod watch sees it terminated to the moment a TuningJob watch sees the preemption
  counted in status;
- operator RSS (VmRSS, VmHWM) with all jobs, and its CPU (cores) over the rate windows;
- after an operator restart (SIGKILL + start): seconds until every job has had a pass
  (the operator's own job series cover all of them).
Floors: p99 < 1 s, RSS < 300 MB, idle jobs add (almost) no requests. Table on stdout,
JSON in bench/results/operator-load.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for sub in ("contract", "operator", "trainer_image", "."):
    sys.path.insert(0, str(ROOT / sub))

from kubernetes import client  # noqa: E402

from bench.operator import apimeasure as am  # noqa: E402
from bench.operator.apimeasure import Watcher, cores, create, percentile, rate, rss  # noqa: E402
from tests.e2e.harness import Kubectl, Operator, sample, wait_for  # noqa: E402
from tests.localcluster import disruption  # noqa: E402
from tests.localcluster import standin_trainer as standin  # noqa: E402
from tests.localcluster.cluster import LocalCluster  # noqa: E402
from tests.localcluster.controlplane import ControlPlane  # noqa: E402
from tests.localcluster.nodeagent.agent import NodeConfig  # noqa: E402

NS = "bench"
OUT = ROOT / "bench" / "results" / "operator-load.json"


def job(
    name: str, *, suspend: bool, trials: int, seconds: float, step: float = 0.0
) -> dict[str, Any]:
    env = standin.env(trials, seconds, step)
    doc = sample(name, NS, suspend=suspend, env=env, resources={})
    doc["spec"]["distribution"] = {"strategy": "Auto", "workers": 1, "gpusPerWorker": 0}
    doc["spec"]["terminationGracePeriodSeconds"] = 5
    return doc


def jobs(custom: client.CustomObjectsApi) -> list[dict[str, Any]]:
    return am.jobs(custom, NS)


def wait_phases(custom: client.CustomObjectsApi, want: dict[str, int], timeout: float) -> None:
    am.wait_phases(custom, NS, want, timeout)


def latency(
    cluster: LocalCluster, watcher: Watcher, names: list[str], samples: int
) -> tuple[list[float], list[float]]:
    """Evict a running job's pod `samples` times (round robin): seconds from its
    termination to the preemption in status, and from the eviction request."""
    pairs = [evict_once(cluster, watcher, names[i % len(names)]) for i in range(samples)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def evict_once(cluster: LocalCluster, watcher: Watcher, name: str) -> tuple[float, float]:
    pod_name = f"{name}-worker-0"

    def running() -> Any:
        pod = cluster.pod(NS, pod_name)
        if pod is None or pod.status.phase != "Running" or pod.metadata.deletion_timestamp:
            return None
        return pod

    pod = wait_for(running, 120, f"{pod_name} running", every=0.2)
    found = watcher.custom.get_namespaced_custom_object(am.GROUP, am.VERSION, NS, am.PLURAL, name)
    key = (name, int(found["status"].get("preemptions") or 0) + 1)
    evicted = time.monotonic()
    disruption.evict_pod(cluster.api, NS, pod_name)
    counted = wait_for(lambda: watcher.preemptions.get(key), 60, f"{key} counted", every=0.05)
    ended = wait_for(lambda: watcher.terminated.get(pod.metadata.uid), 60, "termination")
    return max(0.0, counted - ended), counted - evicted


def restart(operator: Operator, total: int) -> float:
    operator.kill()
    start = time.monotonic()
    operator.start()
    am.wait_all_passed(operator, total, 600, every=0.25)
    return time.monotonic() - start


def measure_running(
    kubectl: Kubectl,
    custom: client.CustomObjectsApi,
    cluster: LocalCluster,
    operator: Operator,
    args: argparse.Namespace,
    baseline: dict[str, float],
) -> dict[str, Any]:
    """`--running` more jobs whose stand-in trains steadily (a step a second in an
    hour-long trial, progress written at the operator's default interval): what each
    costs the API server and etcd beyond `baseline` (the rates before they ran), the
    reconcile latency among them, and the operator's RSS."""
    names = [f"run-{i:03d}" for i in range(args.running)]
    have = Counter((j.get("status") or {}).get("phase") for j in jobs(custom))
    create(kubectl, [job(n, suspend=False, trials=10**6, seconds=3600, step=1.0)
                     for n in names])  # fmt: skip
    wait_phases(custom, {"Running": have["Running"] + args.running}, 900)
    time.sleep(max(20.0, args.running_window / 4))  # past the start-up milestones
    (rates, writes), cpu = cores(operator, lambda: am.rates(kubectl, args.running_window))
    total, base = sum(rates.values()), sum(baseline.values())
    watcher = Watcher(cluster.api, NS)
    time.sleep(2)
    try:
        lat, _ = latency(cluster, watcher, names, args.samples)
    finally:
        watcher.stop.set()
    return {
        "jobs_running": args.running,
        "window_seconds": args.running_window,
        "requests_per_second": rates,
        "requests_per_second_total": round(total, 2),
        "requests_per_second_per_running_job": round((total - base) / args.running, 4),
        "etcd_writes_per_second": round(writes, 2),
        "reconcile_latency_p99": round(percentile(lat, 0.99), 3),
        "reconcile_latency_p50": round(statistics.median(lat), 3),
        "operator_rss_mb": rss(operator),
        "operator_cpu_cores": cpu,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--small", type=int, default=100, help="jobs in the first measurement")
    parser.add_argument("--active", type=int, default=5)
    parser.add_argument("--finished", type=int, default=10)
    parser.add_argument("--window", type=float, default=30.0, help="seconds per rate sample")
    parser.add_argument("--samples", type=int, default=20, help="evictions for the latency")
    parser.add_argument("--running", type=int, default=100, help="steadily training jobs")
    parser.add_argument(
        "--running-window",
        type=float,
        default=180.0,
        help="seconds per rate sample with them (3 progress intervals)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tuneop-bench-load-"))
    cp = ControlPlane(work / "controlplane")
    cluster: LocalCluster | None = None
    operator: Operator | None = None
    watcher: Watcher | None = None
    result: dict[str, Any] = {"when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    try:
        cp.start()
        nodes = [NodeConfig(name="node-0", gpus=0, cpu="64", memory="256Gi", pods=250)]
        cluster = LocalCluster(cp, work / "cluster", nodes=nodes)
        cluster.start()
        kubectl = Kubectl(cp.bin_dir / "kubectl", cp.kubeconfig)
        kubectl.install_crds()
        cluster.create_namespace(NS)
        wait_for(lambda: kubectl("get", "cm", "kube-root-ca.crt", "-n", NS, check=False)
                 .returncode == 0, 60, "kube-root-ca.crt")  # fmt: skip
        custom = client.CustomObjectsApi(cluster.api)
        operator = Operator(cp.kubeconfig, work / "operator.log",  # the product's defaults
                            TUNEOP_OPERATOR_RECONCILE_SECONDS="2",
                            TUNEOP_OPERATOR_PROGRESS_INTERVAL_SECONDS="60").start()  # fmt: skip
        rest = max(0, args.small - args.active - args.finished)
        active = [f"active-{i}" for i in range(args.active)]
        create(kubectl, [job(n, suspend=False, trials=10**6, seconds=1) for n in active])
        create(kubectl, [job(f"done-{i}", suspend=False, trials=1, seconds=0)
                         for i in range(args.finished)])  # fmt: skip
        create(kubectl, [job(f"idle-{i:04d}", suspend=True, trials=1, seconds=0)
                         for i in range(rest)])  # fmt: skip
        want = {"Running": args.active, "Succeeded": args.finished, "Suspended": rest}
        wait_phases(custom, want, 600)
        time.sleep(10)
        small = args.active + args.finished + rest
        result["requests_per_second"] = {str(small): rate(kubectl, args.window)}
        more = args.jobs - small
        create(kubectl, [job(f"idle-{i:04d}", suspend=True, trials=1, seconds=0)
                         for i in range(rest, rest + more)])  # fmt: skip
        t0 = time.monotonic()
        wait_phases(custom, {**want, "Suspended": rest + more}, 1200)
        result["seconds_to_settle_added_jobs"] = round(time.monotonic() - t0, 1)
        time.sleep(10)
        result["requests_per_second"][str(args.jobs)], result["operator_cpu_cores"] = cores(
            operator, lambda: rate(kubectl, args.window)
        )
        result["operator_rss_mb"] = rss(operator)
        watcher = Watcher(cluster.api, NS)
        time.sleep(2)
        lat, from_evict = latency(cluster, watcher, active, args.samples)
        result["reconcile_latency_seconds"] = {
            "samples": len(lat),
            "p50": round(statistics.median(lat), 3),
            "p99": round(percentile(lat, 0.99), 3),
            "max": round(max(lat), 3),
            "from_eviction_p50": round(statistics.median(from_evict), 3),
            "from_eviction_p99": round(percentile(from_evict, 0.99), 3),
        }
        result["seconds_to_reconcile_all_after_restart"] = round(restart(operator, args.jobs), 1)
        time.sleep(10)
        result["operator_rss_mb_after_restart"] = rss(operator)
        result["operator_reconcile_errors"] = next(
            (float(line.split()[-1]) for line in operator.metrics().splitlines()
             if line.startswith("tuneop_reconcile_errors_total ")), None)  # fmt: skip
        log = operator.log_path.read_text(errors="replace")
        result["passes_dropped_by_fence"] = log.count("did not run for over")
        if args.running:
            baseline = result["requests_per_second"][str(args.jobs)]
            result["running"] = measure_running(kubectl, custom, cluster, operator, args, baseline)
    finally:
        if watcher is not None:
            watcher.stop.set()
        if operator is not None:
            operator.stop()
        if cluster is not None:
            cluster.stop()
        cp.stop()
        shutil.rmtree(work, ignore_errors=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    report(result, args)
    lat_ok = result["reconcile_latency_seconds"]["p99"] < 1.0
    rss_ok = max(result["operator_rss_mb"].values()) < 300
    running = result.get("running") or {}
    if running:
        lat_ok = lat_ok and running["reconcile_latency_p99"] < 1.0
        lat_ok = lat_ok and running["requests_per_second_per_running_job"] <= 0.05
    return 0 if lat_ok and rss_ok else 1


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    rates = result["requests_per_second"]
    small, big = str(args.small), str(args.jobs)
    keys = sorted(set(rates[small]) | set(rates[big]), key=lambda k: -rates[big].get(k, 0))
    print(f"{'API requests/s (verb resource)':40} {small + ' jobs':>10} {big + ' jobs':>10}")
    for key in keys[:15]:
        print(f"{key:40} {rates[small].get(key, 0):>10} {rates[big].get(key, 0):>10}")
    totals = [round(sum(rates[n].values()), 1) for n in (small, big)]
    print(f"{'total':40} {totals[0]:>10} {totals[1]:>10}")
    lat = result["reconcile_latency_seconds"]
    print(f"\n{'measure':48} {'value':>10}")
    am.print_measures([
        ("reconcile latency p50 (s)", lat["p50"]),
        ("reconcile latency p99 (s, floor < 1)", lat["p99"]),
        ("reconcile latency max (s)", lat["max"]),
        ("eviction request -> counted p50 (s)", lat["from_eviction_p50"]),
        ("eviction request -> counted p99 (s)", lat["from_eviction_p99"]),
        ("operator CPU (cores)", result["operator_cpu_cores"]),
        ("operator RSS MB (floor < 300)", result["operator_rss_mb"]["VmRSS"]),
        ("operator peak RSS MB", result["operator_rss_mb"]["VmHWM"]),
        ("operator RSS MB after restart", result["operator_rss_mb_after_restart"]["VmRSS"]),
        ("s to reconcile all after restart", result["seconds_to_reconcile_all_after_restart"]),
        ("s to settle the added idle jobs", result["seconds_to_settle_added_jobs"]),
        ("passes dropped by the fence (loop stalls)", result["passes_dropped_by_fence"]),
    ], 48, 10)  # fmt: skip
    print(f"({args.active} active, {args.finished} finished, the rest suspended; JSON: {OUT})")
    running = result.get("running")
    if running:
        per_job = running["requests_per_second_per_running_job"]
        title = f"with {running['jobs_running']} jobs training steadily"
        print(f"\n{title:48} {'value':>10}")
        am.print_measures([
            ("API requests/s, all clients", running["requests_per_second_total"]),
            ("API requests/s per running job (floor <= 0.05)", per_job),
            ("etcd writes/s (kube-apiserver's etcd_requests_total)",
             running["etcd_writes_per_second"]),
            ("reconcile latency p50 (s)", running["reconcile_latency_p50"]),
            ("reconcile latency p99 (s, floor < 1)", running["reconcile_latency_p99"]),
            ("operator RSS MB", running["operator_rss_mb"]["VmRSS"]),
            ("operator CPU (cores)", running["operator_cpu_cores"]),
        ], 48, 10)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
