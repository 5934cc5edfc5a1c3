"""Operator benchmark (`make bench-operator`): how far behind the trainer is the
TuningJob status, and how fast is a preempted trainer replaced and resumed?

Runs the sample job on a fresh local cluster (real control plane, node agent, real
trainer, the operator as a subprocess), samples the status every 0.25 s, evicts the
trainer mid-epoch once, and reports:
- status lag: the trainer's own last progress time (its /progress endpoint) minus
  status.lastProgressTime, sampled together while the trainer runs (the trainer
  patches at most every ~3 s; both timestamps have second precision);
- eviction -> preemption counted in status, -> replacement pod created, -> Running,
  -> Restored reported.
Table on stdout, JSON in bench/results/operator.json.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for sub in ("contract", "operator", "trainer_image", "."):
    sys.path.insert(0, str(ROOT / sub))

from tuneop.api.status import parse_time  # noqa: E402

from bench.operator.cluster_run import cluster_with_operator  # noqa: E402
from tests.e2e.harness import (  # noqa: E402
    sample,
    trainer_progress,
    wait_for,
    wait_mid_epoch,
)
from tests.localcluster import disruption  # noqa: E402

NAME, NS = "emg-cnn", "default"
OUT = ROOT / "bench" / "results" / "operator.json"


class _Stopper:
    """Stops the status sampler however the run ends."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def close(self) -> None:
        self.event.set()


def main() -> int:
    samples: list[tuple[float, dict[str, Any], dict[str, Any] | None]] = []
    stop = threading.Event()
    with cluster_with_operator(NS) as run, contextlib.closing(_Stopper(stop)):
        kubectl, cluster = run.kubectl, run.cluster
        job = sample(NAME, NS)
        kubectl.apply(job)

        def sampler() -> None:
            while not stop.is_set():
                trainer = trainer_progress(kubectl, NS, f"{NAME}-worker-0")
                found = kubectl.job(NS, NAME) or {}
                samples.append((time.time(), dict(found.get("status") or {}), trainer))
                time.sleep(0.25)

        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        data = job["spec"]["data"]
        steps = int(data["synthetic"]["samples"] * (1 - data["validationSplit"])) // 32
        wait_mid_epoch(kubectl, NS, NAME, steps, timeout=600)
        t_evict = time.time()
        disruption.evict_pod(cluster.api, NS, f"{NAME}-worker-0")

        def new_pod(phase: str | None = None) -> float | None:
            for pod in kubectl.pods(NS, NAME):
                if pod["metadata"]["labels"].get("tuneop.io/attempt") == "1" and (
                    phase is None or pod["status"].get("phase") == phase
                ):
                    return time.time()
            return None

        t_created = wait_for(new_pod, 120, "the replacement pod", every=0.1)
        t_running = wait_for(lambda: new_pod("Running"), 120, "it running", every=0.1)
        wait_for(
            lambda: samples and samples[-1][1].get("phase") in ("Succeeded", "Failed"),
            900,
            "the end",
            every=0.5,
        )
        stop.set()
        thread.join(5)

    def first(predicate: Any) -> float | None:
        return next((t for t, s, _ in samples if predicate(s)), None)

    t_counted = first(lambda s: s.get("preemptions", 0) >= 1)
    t_restored = first(lambda s: s.get("restores", 0) >= 1)
    lags = []
    for _, s, trainer in samples:
        last = parse_time(s.get("lastProgressTime"))
        own = parse_time((trainer or {}).get("last_progress_time"))
        if s.get("phase") == "Running" and last and own and trainer.get("phase") == "Running":
            lags.append(max(0.0, own.timestamp() - last.timestamp()))
    final = samples[-1][1]
    result = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "job": "manifests/samples/tuningjob-emg.yaml",
        "phase": final.get("phase"),
        "status_samples": len(lags),
        "status_lag_seconds": {
            "median": round(statistics.median(lags), 2) if lags else None,
            "p95": round(sorted(lags)[int(0.95 * (len(lags) - 1))], 2) if lags else None,
            "max": round(max(lags), 2) if lags else None,
        },
        "eviction_to_seconds": {
            "preemption_in_status": round(t_counted - t_evict, 2) if t_counted else None,
            "replacement_pod_created": round(t_created - t_evict, 2),
            "replacement_pod_running": round(t_running - t_evict, 2),
            "restored_in_status": round(t_restored - t_evict, 2) if t_restored else None,
        },
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    lag, ev = result["status_lag_seconds"], result["eviction_to_seconds"]
    print(f"{'measure':40} {'seconds':>8}")
    for key, value in [*((f"status lag {k}", v) for k, v in lag.items()),
                       *((f"eviction -> {k}", v) for k, v in ev.items())]:  # fmt: skip
        print(f"{key:40} {value!s:>8}")
    print(f"(job {final.get('phase')}; {len(lags)} status samples; JSON: {OUT})")
    return 0 if final.get("phase") == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
