"""Operator scale benchmark (`make bench-operator-scale`): 10,000 TuningJobs, 1,000 of
them training, on simulated nodes.

The real control plane (etcd, kube-apiserver, controller-manager, scheduler) and the
real operator, two replicas peering as the chart runs them (kopf peering, the
product's 60-s lifetime unless `--peering-lifetime`); kwok plays the nodes and their
kubelets, so thousands of pods cost no containers (bench/operator/kwok_cluster.py),
and bench/operator/scale_sim.py plays the trainers (progress ConfigMap writes at the
trainer's default interval) and the churn (evictions, searches finishing, new jobs).
What is simulated: the kubelets and the trainers, through the API server, as the real
ones would write. What is real: every request the operator makes and every object it
reads.

Steps: the two replicas start; `--jobs - --training` suspended jobs (idle: no pod)
arrive, and once all have settled the operator's CPU and the API server's requests over
`--baseline-window`; then `--training` jobs start, and `--quiet-window` s with their
trainers alone (what a training job costs: requests beyond the idle window); then the
churn, and after `--warmup` s the measured `--window`: kube-apiserver's
`apiserver_request_total` by verb and resource and `etcd_requests_total` writes, the
operator's CPU (cores) and RSS, and the reconcile latency, from watches, from each event
to the status that follows it (a pod's end to the preemption counted, a pod's success to
the job Succeeded, a progress write to the same step in status.progress, a new job to
its first phase); then the active replica SIGKILLed: seconds until the standby leads,
and until it has passed over every job (at most `--failover-limit` s after it leads).
Floors (reported, not asserted): reconcile p99 < 1 s, the operator under 1 core on
average and under the chart's memory limit (values.yaml), at most 0.05 API requests/s per
training job, every job passed within 60 s of the take-over. Table on stdout, JSON in
bench/results/operator-scale.json."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for sub in ("contract", "operator", "trainer_image", "."):
    sys.path.insert(0, str(ROOT / sub))

import tuneop_contract as contract  # noqa: E402
import yaml  # noqa: E402
from kubernetes import client  # noqa: E402
from kubernetes.utils import parse_quantity  # noqa: E402
from tuneop.run.watched import RESYNC_SECONDS  # noqa: E402

from bench.operator import apimeasure as am  # noqa: E402
from bench.operator import kwok_cluster  # noqa: E402
from bench.operator.scale_watch import ScaleWatcher  # noqa: E402
from tests.e2e.harness import Kubectl, Operator, sample, wait_for  # noqa: E402
from tests.localcluster.controlplane import ControlPlane  # noqa: E402

NS = "bench"
OUT = ROOT / "bench" / "results" / "operator-scale.json"


def chart_memory_limit_mib() -> float:
    """The operator's memory limit as the chart sets it (resources.limits.memory), MiB."""
    values = yaml.safe_load((ROOT / "charts" / "tuneop" / "values.yaml").read_text())
    return float(parse_quantity(values["resources"]["limits"]["memory"])) / 2**20


RESYNC_READS = 3
"""A steady job's live reads at each resync (the job, its pods, its progress map): the
windows here start under RESYNC_SECONDS after the jobs did, so they see none of them."""
Obj = dict[str, Any]


def step(what: str) -> None:
    """Where the run is, on stderr (a full run takes minutes)."""
    print(f"{dt.datetime.now(dt.UTC):%H:%M:%S} {what}", file=sys.stderr, flush=True)


def job(name: str, suspend: bool) -> Obj:
    """The sample search on one simulated GPU, its claim on the static volumes."""
    doc = sample(name, NS, suspend=suspend, resources={}, image="tuneop/trainer:bench")
    doc["spec"]["distribution"] = {"strategy": "Auto", "workers": 1, "gpusPerWorker": 1}
    doc["spec"]["checkpoint"]["storageClassName"] = kwok_cluster.STORAGE_CLASS
    doc["spec"]["terminationGracePeriodSeconds"] = 5
    return doc


def create_jobs(api: client.ApiClient, docs: list[Obj]) -> None:
    """POST each TuningJob, eight at a time (kubectl's lists go one by one)."""
    custom = client.CustomObjectsApi(api)

    def post(doc: Obj) -> None:
        custom.create_namespaced_custom_object(
            am.GROUP, am.VERSION, NS, am.PLURAL, doc, _preload_content=False
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(post, docs))


def operators(cp: ControlPlane, work: Path, lifetime: int) -> tuple[Operator, Operator]:
    """Two replicas at the product's defaults (2-s pass floor, 60-s progress interval),
    peering `lifetime` s (the product's default 60); the first outranks the second, so
    it leads."""
    defaults = {"TUNEOP_OPERATOR_RECONCILE_SECONDS": "2",
                "TUNEOP_OPERATOR_PROGRESS_INTERVAL_SECONDS": "60",
                "TUNEOP_OPERATOR_PEERING_LIFETIME_SECONDS": str(lifetime)}  # fmt: skip
    leader = Operator(cp.kubeconfig, work / "leader.log", TUNEOP_OPERATOR_PRIORITY="300",
                      **defaults)  # fmt: skip
    standby = Operator(cp.kubeconfig, work / "standby.log", TUNEOP_OPERATOR_PRIORITY="200",
                       **defaults)  # fmt: skip
    leader.start()
    standby.start()
    wait_for(lambda: leader.leads() and not standby.leads(), 90, "the first replica leading")
    return leader, standby


def simulator(cp: ControlPlane, work: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    template = work / "new-job.json"
    template.write_text(json.dumps(job("new", suspend=False)))
    return subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "operator" / "scale_sim.py"),
         f"--kubeconfig={cp.kubeconfig}", f"--namespace={NS}", f"--template={template}",
         f"--preempt-per-minute={args.preempt_per_minute}",
         f"--finish-per-minute={args.finish_per_minute}",
         f"--create-per-minute={args.create_per_minute}",
         f"--interval={contract.DEFAULT_PROGRESS_INTERVAL_SECONDS}", "--paused"],
        stdout=subprocess.PIPE, stderr=(work / "sim.log").open("ab"), text=True,
        start_new_session=True,
    )  # fmt: skip


def prepare(cp: ControlPlane, api: client.ApiClient, args: argparse.Namespace) -> Kubectl:
    kubectl = Kubectl(cp.bin_dir / "kubectl", cp.kubeconfig)
    kubectl.install_crds()
    gpus = args.gpus_per_node
    count = math.ceil(args.training * 1.2 / gpus) + 1  # room for replacements and churn
    kwok_cluster.nodes(api, count, gpus)
    minutes = (args.warmup + args.window + 300) / 60  # the run, failover included
    kwok_cluster.volumes(api, args.training + math.ceil(args.create_per_minute * minutes) + 20)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
    wait_for(lambda: kubectl("get", "cm", "kube-root-ca.crt", "-n", NS, check=False)
             .returncode == 0, 60, "kube-root-ca.crt")  # fmt: skip
    wait_for(lambda: kubectl("get", "sa", "default", "-n", NS, check=False).returncode == 0,
             60, "the default ServiceAccount")  # fmt: skip
    return kubectl


def idle_phase(
    cp: ControlPlane, api: client.ApiClient, kubectl: Kubectl, watcher: ScaleWatcher,
    work: Path, args: argparse.Namespace, result: Obj,
) -> tuple[Operator, Operator]:  # fmt: skip
    """The suspended jobs, made while the operator runs (as they accumulate on a
    cluster): how long until each has settled, then what they cost."""
    leader, standby = operators(cp, work, args.peering_lifetime)
    idle = args.jobs - args.training
    start, cpu = time.monotonic(), am.cpu_seconds(leader)
    create_jobs(api, [job(f"idle-{i:05d}", suspend=True) for i in range(idle)])
    created = time.monotonic() - start
    step(f"{idle} idle jobs created in {created:.0f} s")
    wait_for(lambda: watcher.count("Suspended") >= idle, 1800, f"{idle} jobs Suspended", 2)
    took = time.monotonic() - start
    result["idle"] = {
        "jobs": idle,
        "seconds_to_create": round(created, 1),
        "seconds_to_settle": round(took, 1),
        "operator_cpu_cores_settling": round((am.cpu_seconds(leader) - cpu) / took, 3),
        "operator_rss_mib_settled": am.rss(leader),
    }
    time.sleep(5)
    (rates, writes), cores = am.cores(leader, lambda: am.rates(kubectl, args.baseline_window))
    result["idle"].update(requests_per_second=rates, etcd_writes_per_second=writes,
                          requests_per_second_total=round(sum(rates.values()), 2),
                          operator_cpu_cores=cores, operator_rss_mib=am.rss(leader))  # fmt: skip
    return leader, standby


def window(kubectl: Kubectl, leader: Operator, seconds: float, base: float, training: int) -> Obj:
    """kube-apiserver's and the operator's figures over `seconds`."""
    (((rates, writes), cores), passes), busy = am.machine_busy(lambda: am.pass_rates(
        leader, lambda: am.cores(leader, lambda: am.rates(kubectl, seconds))
    ))  # fmt: skip
    total = sum(rates.values())
    return {
        "operator_passes": passes,
        "machine_busy_cores": busy,
        "window_seconds": seconds,
        "requests_per_second": rates,
        "requests_per_second_total": round(total, 2),
        "requests_per_second_per_training_job": round((total - base) / training, 4),
        "requests_per_second_all_clients_per_training_job": round(total / training, 4),
        "etcd_writes_per_second": writes,
        "operator_cpu_cores": cores,
        "operator_rss_mib": am.rss(leader),
    }


def training_phase(
    api: client.ApiClient, kubectl: Kubectl, watcher: ScaleWatcher, leader: Operator,
    standby: Operator, sim: subprocess.Popen[str], args: argparse.Namespace, result: Obj,
) -> None:  # fmt: skip
    """The training jobs start; a quiet window (trainers only), then the churn and, after
    the warm-up, the measured window."""
    start = time.monotonic()
    create_jobs(api, [job(f"train-{i:05d}", suspend=False) for i in range(args.training)])
    wait_for(lambda: watcher.count("Running") >= args.training, 1200,
             f"{args.training} jobs Running", 2)  # fmt: skip
    result["seconds_to_start_training"] = round(time.monotonic() - start, 1)
    base = result["idle"]["requests_per_second_total"]
    time.sleep(10)  # past the trainers' first records
    step("quiet window (trainers only)")
    result["quiet"] = window(kubectl, leader, args.quiet_window, base, args.training)
    sim.send_signal(signal.SIGUSR1)
    step("churn; warm-up, then the window")
    time.sleep(args.warmup)
    watcher.measuring(True)
    standby_cpu = am.cpu_seconds(standby)
    result["steady"] = window(kubectl, leader, args.window, base, args.training)
    watcher.measuring(False)
    result["steady"].update(
        training_jobs=watcher.count("Running"),
        jobs=len(watcher.phases),
        standby_cpu_cores=round((am.cpu_seconds(standby) - standby_cpu) / args.window, 3),
    )


def failover(
    leader: Operator, standby: Operator, watcher: ScaleWatcher, limit: float, result: Obj
) -> None:
    """SIGKILL the leader; the standby takes over when its peering record expires and
    passes over every job (waited for at most `limit` s after the take-over: past the
    floor, the count it had reached says how far it got)."""
    total = len(watcher.phases)
    at_kill = am.rss(leader)
    leader.kill()
    start = time.monotonic()
    wait_for(standby.leads, 300, "the standby leading", every=0.5)
    took_over = time.monotonic() - start
    result["failover"] = {"jobs": total, "seconds_to_take_over": round(took_over, 1),
                          "leader_rss_mib_at_kill": at_kill}  # fmt: skip
    try:
        # each look reads the standby's whole /metrics (about 2 s of its CPU at 10,000
        # jobs, on the loop it is taking over with): seldom, at the cost of resolution
        am.wait_all_passed(standby, total, limit, every=10.0)
        done: float | None = time.monotonic() - start
    except TimeoutError:
        done = None
    result["failover"].update(
        seconds_to_pass_all_after_kill=None if done is None else round(done, 1),
        seconds_to_pass_all_after_take_over=None if done is None else round(done - took_over, 1),
        passed_when_measured=am.passed(standby),
        seconds_measured_after_take_over=round(time.monotonic() - start - took_over, 1),
        standby_rss_mib_after=am.rss(standby),
    )


def summarize(watcher: ScaleWatcher, result: Obj) -> list[float]:
    latencies, missing = watcher.latencies()
    everything = [x for values in latencies.values() for x in values]
    result["reconcile_latency_seconds"] = {
        kind: {"samples": len(v), "no_status_yet": missing.get(kind, sum(missing.values()))}
        | ({"p50": round(am.percentile(v, 0.5), 3), "p99": round(am.percentile(v, 0.99), 3),
            "max": round(max(v), 3)} if v else {})
        for kind, v in [*latencies.items(), ("all", everything)]
    }  # fmt: skip
    return everything


def floors(result: Obj) -> dict[str, Obj]:
    """Each floor: the figure it judges, the bound, and whether it holds. Requests per
    training job are judged without churn (what a job costs while it trains), plus the
    resync's reads the quiet window is too young to hold; the figure with churn is in
    the table beside it."""
    steady, lat, over = result["steady"], result["reconcile_latency_seconds"], result["failover"]
    worst = max((v.get("p99", math.inf) for k, v in lat.items() if k != "all" and v["samples"]),
                default=math.inf)  # fmt: skip
    peak = max(steady["operator_rss_mib"]["VmHWM"], over["standby_rss_mib_after"]["VmHWM"])
    per_job = round(result["quiet"]["requests_per_second_per_training_job"]
                    + RESYNC_READS / RESYNC_SECONDS, 4)  # fmt: skip
    took = over["seconds_to_pass_all_after_take_over"]
    limit = chart_memory_limit_mib()
    checks = {
        "reconcile latency p99 (s, worst kind)": (worst, "< 1", worst < 1.0),
        "operator CPU (cores, window with churn)": (
            steady["operator_cpu_cores"], "< 1", steady["operator_cpu_cores"] < 1.0),
        "operator peak RSS (MiB, either replica)": (
            peak, f"< {limit:.0f}", peak < limit),
        "API requests/s per training job (+ resync)": (per_job, "<= 0.05", per_job <= 0.05),
        "s to pass every job after the take-over": (
            took if took is not None else f"> {over['seconds_measured_after_take_over']}",
            "<= 60", took is not None and took <= 60),
    }  # fmt: skip
    return {k: {"value": v, "floor": f, "pass": ok} for k, (v, f, ok) in checks.items()}


def run(args: argparse.Namespace, work: Path, result: Obj) -> None:
    cp = ControlPlane(work / "controlplane")
    kwok = sim = None
    leader = standby = None
    watcher: ScaleWatcher | None = None
    try:
        step("control plane")
        cp.start()
        api = cp.api_client()
        kwok = kwok_cluster.start_kwok(cp, work)
        step("nodes, volumes, namespace")
        kubectl = prepare(cp, api, args)
        watcher = ScaleWatcher(api, NS)
        step("idle jobs")
        leader, standby = idle_phase(cp, api, kubectl, watcher, work, args, result)
        sim = simulator(cp, work, args)
        step("training jobs")
        training_phase(api, kubectl, watcher, leader, standby, sim, args, result)
        step("failover")
        failover(leader, standby, watcher, args.failover_limit, result)
        summarize(watcher, result)
        result["watch_errors"] = dict(watcher.errors)
    finally:
        if sim is not None:
            sim.send_signal(signal.SIGTERM)
            out, _ = sim.communicate(timeout=60)
            result["simulator_sent"] = (
                json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
            )
        if watcher is not None:
            watcher.stop.set()
        for operator in (leader, standby):
            if operator is not None:
                operator.stop()
        kwok_cluster.stop(kwok)
        cp.stop()


def report_windows(result: Obj) -> None:
    windows = [("idle", result["idle"]), ("quiet", result["quiet"]), ("churn", result["steady"])]
    rates = [w["requests_per_second"] for _, w in windows]
    keys = sorted(set().union(*rates), key=lambda k: -rates[2].get(k, 0))
    print(f"{'API requests/s (verb resource)':40}" + "".join(f"{n:>9}" for n, _ in windows))
    rows = [(key, [r.get(key, 0) for r in rates]) for key in keys[:20]]
    rows += [
        ("total", [round(sum(r.values()), 1) for r in rates]),
        ("etcd writes/s", [w["etcd_writes_per_second"] for _, w in windows]),
        ("operator CPU (cores)", [w["operator_cpu_cores"] for _, w in windows]),
        ("operator RSS (MiB)", [w["operator_rss_mib"]["VmRSS"] for _, w in windows]),
        (f"machine busy (cores of {os.cpu_count()})",
         [w.get("machine_busy_cores", "-") for _, w in windows]),
        *((f"operator {name.replace('_', ' ')}", [
            w.get("operator_passes", {}).get(name, "-") for _, w in windows])
          for name in ("passes_per_second", "live_reads_per_second", "errors_per_second")),
    ]  # fmt: skip
    for key, values in rows:
        print(f"{key:40}" + "".join(f"{v:>9}" for v in values))


def report_latency(result: Obj) -> None:
    print(f"\n{'reconcile latency (s)':20}" + "".join(
        f"{c:>10}" for c in ("samples", "p50", "p99", "max", "no status")))  # fmt: skip
    for kind, v in result["reconcile_latency_seconds"].items():
        cells = [v["samples"], *(v.get(k, "-") for k in ("p50", "p99", "max"))]
        print(f"{kind:20}" + "".join(f"{c:>10}" for c in [*cells, v["no_status_yet"]]))


def report(result: Obj) -> None:
    report_windows(result)
    report_latency(result)
    s, q, f, i = result["steady"], result["quiet"], result["failover"], result["idle"]
    standby = f["standby_rss_mib_after"]
    print(f"\n{'measure':52} {'value':>11}")
    am.print_measures([
        ("jobs / training in the churn window", f"{s['jobs']}/{s['training_jobs']}"),
        ("s to create the idle jobs", i["seconds_to_create"]),
        ("s until every idle job had settled", i["seconds_to_settle"]),
        ("operator CPU (cores) while they settled", i["operator_cpu_cores_settling"]),
        ("s for the training jobs to run", result["seconds_to_start_training"]),
        ("standby CPU (cores), churn window", s["standby_cpu_cores"]),
        ("operator peak RSS (MiB)", s["operator_rss_mib"]["VmHWM"]),
        ("API requests/s per training job, quiet", q["requests_per_second_per_training_job"]),
        ("API requests/s per training job, churn", s["requests_per_second_per_training_job"]),
        ("  the same, all clients, idle load included",
         s["requests_per_second_all_clients_per_training_job"]),
        ("s from the kill to the standby leading", f["seconds_to_take_over"]),
        ("s from the take-over to every job passed", f["seconds_to_pass_all_after_take_over"]),
        ("s from the kill to every job passed", f["seconds_to_pass_all_after_kill"]),
        ("jobs passed by the standby when measured", f"{f['passed_when_measured']}/{f['jobs']}"),
        ("standby RSS / peak (MiB) after", f"{standby['VmRSS']}/{standby['VmHWM']}"),
    ], 52, 11)  # fmt: skip
    print(f"\n{'floor':44} {'value':>9} {'floor':>7} {'':>5}")
    for key, v in result["floors"].items():
        print(f"{key:44} {v['value']!s:>9} {v['floor']:>7} {'pass' if v['pass'] else 'FAIL':>5}")
    print(f"(simulator sent: {result.get('simulator_sent')}; JSON: {OUT})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="TuningJobs in all")
    parser.add_argument("--training", type=int, default=1_000, help="of them training")
    parser.add_argument("--preempt-per-minute", type=float, default=100.0)
    parser.add_argument("--create-per-minute", type=float, default=50.0)
    parser.add_argument("--finish-per-minute", type=float, default=50.0)
    parser.add_argument("--baseline-window", type=float, default=30.0, help="s, idle jobs only")
    parser.add_argument("--quiet-window", type=float, default=60.0, help="s, trainers only")
    parser.add_argument("--warmup", type=float, default=30.0, help="s of churn before the window")
    parser.add_argument(
        "--window", type=float, default=180.0, help="s measured (3 progress intervals)"
    )
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument(
        "--peering-lifetime",
        type=int,
        default=60,
        help="s; the product's default (a shorter one only makes a trial quicker)",
    )
    parser.add_argument(
        "--failover-limit",
        type=float,
        default=180.0,
        help="s after the take-over to wait for every job's pass",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = parser.parse_args()
    # a stop (SIGTERM, as from timeout) still runs the clean-up below: no process outlives it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="tuneop-bench-scale-"))
    result: Obj = {"when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                   "args": vars(args)}  # fmt: skip
    started = time.monotonic()
    try:
        run(args, work, result)
        result["floors"] = floors(result)
    except TimeoutError as err:  # a step that never came: said in one line, not a traceback
        result["cut_short"] = str(err)
        print(f"bench-operator-scale: cut short, {err} (what was measured: {OUT})")
        return 1
    finally:
        result["seconds_in_all"] = round(time.monotonic() - started, 1)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(result, indent=2) + "\n")  # what there is, even cut short
        if args.keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
