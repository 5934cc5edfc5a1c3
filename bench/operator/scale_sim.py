"""The trainers and the churn of the scale benchmark (bench_scale.py), in one process.

kwok runs the operator's pods (they become Running, and a deleted one goes away; see
kwok-stages.yaml); nothing runs in them. This process plays what would run there and
what people and the cluster do, through the API server only, as they would:
- each Running trainer pod's trainer: its progress ConfigMap merge-patched as the real
  trainer's reporter does (tuneop_trainer.report.progress: a milestone at once, the
  steady record at most every `--interval` s, the record `tuneop_contract.Progress`
  builds): at the pod's start, at each trial's end (every `--trial-seconds`), steadily
  in between, and "Preempted" when its pod is being deleted;
- `--preempt-per-minute` evictions (the Eviction API, as a drain or the autoscaler) of a
  random training pod;
- `--finish-per-minute` searches finishing: the trainer's last progress record, then
  what the kubelet writes when the container exits 0: the pod's status Succeeded with the
  trainer's termination message (the final summary, `tuneop_contract.FinalSummary`);
- `--create-per-minute` new training jobs (the TuningJob in `--template`).
A pod seen Running for the first time gets its first steady write at a random point of
the interval (and its first trial end at a random point of a trial): jobs that have
trained for a while, not a thousand that started in the same second.
With `--paused` the churn waits for SIGUSR1 (the trainers write from the start). Writes go
through a thread pool (`--workers`); on SIGTERM or after `--duration` s it prints what it
sent as one JSON line."""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import itertools
import json
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for sub in ("contract", "operator", "trainer_image", "."):
    sys.path.insert(0, str(ROOT / sub))

import kubernetes.config  # noqa: E402
import tuneop_contract as contract  # noqa: E402
from kubernetes import client  # noqa: E402
from tuneop.api import names  # noqa: E402

from bench.operator.apimeasure import GROUP, PLURAL, VERSION, stream  # noqa: E402

Obj = dict[str, Any]
MERGE = "application/merge-patch+json"
TRIALS_TOTAL = 1000
STEPS_PER_SECOND = 5


@dataclasses.dataclass
class Trainer:
    job: str
    pod: str
    containers: list[tuple[str, str]]  # (name, image) of the pod's containers
    started: float
    trial: int = 0
    steady_due: float = 0.0
    trial_due: float = 0.0

    def record(self, phase: str = contract.PHASE_RUNNING, message: str = "") -> Obj:
        """The progress ConfigMap patch the trainer would send now."""
        best = f"{self.trial - 1:04d}" if self.trial else None
        progress = contract.Progress(
            phase=phase,
            trial_id=f"{self.trial:04d}" if phase == contract.PHASE_RUNNING else None,
            trials_completed=self.trial,
            trials_total=TRIALS_TOTAL,
            step=int((time.monotonic() - self.started) * STEPS_PER_SECOND),
            last_progress_time=contract.now_rfc3339(),
            best_trial_id=best,
            best_score=self.trial / TRIALS_TOTAL if best else None,
            objective="val_accuracy",
            direction="max",
            message=message,
        )
        return contract.progress_configmap_patch(progress)


class Simulator:
    def __init__(self, api: client.ApiClient, args: argparse.Namespace) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.args = args
        self.namespace: str = args.namespace
        self.trainers: dict[str, Trainer] = {}  # pod uid -> its trainer
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(args.workers)
        self.sent: Counter[str] = Counter()
        self.stop = threading.Event()
        self.churning = threading.Event()
        self.template: Obj = json.loads(Path(args.template).read_text())
        self.created = itertools.count()

    # -- the trainers --------------------------------------------------------------------
    def watch_pods(self) -> None:
        since: dict[str, str] = {}  # where the last stream stopped (apimeasure.stream)
        while not self.stop.is_set():
            try:
                for kind, pod in stream(
                    self.core.list_namespaced_pod, self.namespace, since=since,
                    label_selector=names.TRAINER_PODS_SELECTOR, timeout_seconds=60,
                ):  # fmt: skip
                    self.on_pod(kind, pod)
            except Exception as exc:  # a cut watch: list and watch again
                self.sent[f"watch error {type(exc).__name__}"] += 1
                time.sleep(1)

    def on_pod(self, kind: str, pod: Obj) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        uid = meta["uid"]
        with self.lock:
            trainer = self.trainers.get(uid)
            if kind == "DELETED" or status.get("phase") in ("Succeeded", "Failed"):
                self.trainers.pop(uid, None)
                return
            if meta.get("deletionTimestamp"):
                if trainer is not None:  # SIGTERM: the trainer's last record, then exit
                    del self.trainers[uid]
                    self.send("preempted", trainer, contract.PHASE_PREEMPTED, "preempted")
                return
            if trainer is not None or status.get("phase") != "Running":
                return
            containers = [(c["name"], c.get("image", "")) for c in pod["spec"]["containers"]]
            job = meta["labels"][names.LABEL_JOB]
            now = time.monotonic()
            trainer = Trainer(job, meta["name"], containers, now)
            trainer.steady_due = now + random.uniform(0, self.args.interval)
            trainer.trial_due = now + random.uniform(0, self.args.trial_seconds)
            self.trainers[uid] = trainer
            self.send("start", trainer)  # the first step of a process is a milestone

    def send(self, what: str, trainer: Trainer, phase: str = contract.PHASE_RUNNING,
             message: str = "") -> None:  # fmt: skip
        body = trainer.record(phase, message)
        name = names.progress_configmap_name(trainer.job)
        self.submit(what, lambda: self.core.patch_namespaced_config_map(
            name, self.namespace, body, _content_type=MERGE, _preload_content=False))  # fmt: skip

    def submit(self, what: str, call: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                call()
                self.sent[what] += 1
            except client.ApiException as exc:
                self.sent[f"{what} error {exc.status}"] += 1
            except Exception as exc:
                self.sent[f"{what} error {type(exc).__name__}"] += 1

        self.pool.submit(run)

    def tick(self) -> None:
        """The steady writes and trial ends that are due."""
        now = time.monotonic()
        with self.lock:
            for trainer in self.trainers.values():
                if now >= trainer.trial_due:
                    trainer.trial += 1
                    trainer.trial_due = now + self.args.trial_seconds
                    trainer.steady_due = now + self.args.interval
                    self.send("trial end", trainer)
                elif now >= trainer.steady_due:
                    trainer.steady_due = now + self.args.interval
                    self.send("steady", trainer)

    # -- the churn -----------------------------------------------------------------------
    def pick(self) -> tuple[str, Trainer] | None:
        with self.lock:
            if not self.trainers:
                return None
            uid = random.choice(list(self.trainers))
            return uid, self.trainers[uid]

    def preempt(self) -> None:
        picked = self.pick()
        if picked is None:
            return
        _, trainer = picked
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=trainer.pod, namespace=self.namespace)
        )
        self.submit("evict", lambda: self.core.create_namespaced_pod_eviction(
            trainer.pod, self.namespace, body, _preload_content=False))  # fmt: skip

    def finish(self) -> None:
        picked = self.pick()
        if picked is None:
            return
        uid, trainer = picked
        with self.lock:
            self.trainers.pop(uid, None)
        trainer.trial = TRIALS_TOTAL
        self.send("final", trainer, contract.PHASE_COMPLETED, "search completed")
        self.submit("exit 0", lambda: self.core.patch_namespaced_pod_status(
            trainer.pod, self.namespace, exited(trainer), _content_type=MERGE,
            _preload_content=False))  # fmt: skip

    def create(self) -> None:
        doc = json.loads(json.dumps(self.template))
        doc["metadata"] = {"name": f"{self.args.prefix}-{next(self.created):05d}",
                           "namespace": self.namespace}  # fmt: skip
        self.submit("create", lambda: self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, doc, _preload_content=False))  # fmt: skip

    def run(self) -> None:
        threading.Thread(target=self.watch_pods, daemon=True).start()
        start = time.monotonic()
        while not self.churning.is_set() and not self.stop.wait(0.2):
            self.tick()
        per_minute = {"preempt": self.args.preempt_per_minute,
                      "finish": self.args.finish_per_minute,
                      "create": self.args.create_per_minute}  # fmt: skip
        begun = time.monotonic()
        churn = [(begun + random.uniform(0, 60 / n), what) for what, n in per_minute.items() if n]
        heapq.heapify(churn)
        while not self.stop.wait(0.2) and time.monotonic() - start < self.args.duration:
            self.tick()
            while churn and churn[0][0] <= time.monotonic():
                due, what = heapq.heappop(churn)
                getattr(self, what)()
                heapq.heappush(churn, (due + 60 / per_minute[what], what))
        self.pool.shutdown(wait=True, cancel_futures=True)


def exited(trainer: Trainer) -> Obj:
    """The pod status the kubelet writes when the trainer exits 0: Succeeded, each
    container terminated, the trainer's termination message the final summary."""
    now = contract.now_rfc3339()
    best = f"{TRIALS_TOTAL - 1:04d}"
    summary = contract.FinalSummary(TRIALS_TOTAL, TRIALS_TOTAL, best, 1.0, {}).to_message()
    statuses = []
    for name, image in trainer.containers:
        terminated: Obj = {"exitCode": 0, "reason": "Completed", "startedAt": now,
                           "finishedAt": now}  # fmt: skip
        if name == names.TRAINER_CONTAINER:
            terminated["message"] = summary
        statuses.append({"name": name, "image": image, "imageID": "", "ready": False,
                         "restartCount": 0, "started": False,
                         "state": {"terminated": terminated}})  # fmt: skip
    return {"status": {"phase": "Succeeded", "containerStatuses": statuses}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--template", required=True, help="JSON TuningJob for --create")
    parser.add_argument("--prefix", default="new")
    parser.add_argument(
        "--interval", type=float, default=contract.DEFAULT_PROGRESS_INTERVAL_SECONDS
    )
    parser.add_argument("--trial-seconds", type=float, default=600.0)
    parser.add_argument("--preempt-per-minute", type=float, default=100.0)
    parser.add_argument("--finish-per-minute", type=float, default=50.0)
    parser.add_argument("--create-per-minute", type=float, default=50.0)
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--paused", action="store_true", help="churn from SIGUSR1 on")
    args = parser.parse_args()
    config = client.Configuration()
    kubernetes.config.load_kube_config(args.kubeconfig, client_configuration=config)
    config.connection_pool_maxsize = args.workers + 2  # one connection per writer
    sim = Simulator(client.ApiClient(config), args)
    signal.signal(signal.SIGTERM, lambda *_: sim.stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: sim.churning.set())
    if not args.paused:
        sim.churning.set()
    sim.run()
    print(json.dumps(dict(sim.sent)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
