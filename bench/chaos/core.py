"""The chaos soak's core, on a cluster someone else started (bench/chaos/run.py's own,
or the e2e session's): two operator replicas, a job per slot (a new one in a fresh
namespace whenever a slot's job ends while faults still come), the seeded faults on
threads of their own, a sampler checking status and memory as it runs, each job
checked when it ends and deleted, with nothing of it left behind. Given Kueue's manager
(run.py starts one; the e2e short lane does not), it sets up the soak's queues
(bench/chaos/queues.py) and sends the queued kinds to them; without it the Kueue faults
record themselves skipped and a queued kind's label is inert."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import threading
import time
from pathlib import Path
from typing import Any

import tuneop_contract as contract

from bench.chaos import alerts, jobkinds, matrix
from bench.chaos import invariants as inv
from bench.chaos import schedule as s
from bench.chaos.alerts import Alerts
from bench.chaos.faults import JOB_LABEL, Context, SlotJob
from bench.chaos.ledger import ERROR, INJECTED, FaultRecord, Ledger, Violation
from bench.chaos.queues import Queues
from bench.chaos.registry import FAULTS
from bench.chaos.replicas import Replicas
from tests.e2e.harness import SCRIPT_CONFIGMAP, Env, Kubectl, claim_dir
from tests.localcluster.cluster import LocalCluster
from tests.localcluster.kueue import Kueue
from tests.localcluster.nodeagent import provisioner

Obj = dict[str, Any]
FINISHED = ("Succeeded", "Failed")


@dataclasses.dataclass(frozen=True)
class SoakConfig:
    duration: float
    seed: int
    jobs: int
    max_faults: int = s.Limits.max_faults
    max_overlap: int = s.Limits.max_overlap
    burst_gap: tuple[float, float] = s.Limits.burst_gap
    """Seconds between bursts of faults (low, high): the fault rate."""
    settle_seconds: float = 900.0
    """After the fault window, how long the last jobs may take to end."""
    peering_lifetime: int = 15
    memory_limit_mib: float = 1024.0
    fault_kinds: tuple[str, ...] = s.FAULT_KINDS
    job_kinds: tuple[str, ...] = jobkinds.JOB_KINDS
    alerts: bool = True
    """A prometheus evaluates the shipped alert rules on the replicas (bench/chaos/alerts.py)."""

    def limits(self) -> s.Limits:
        return s.Limits(self.duration, self.jobs, max_faults=self.max_faults,
                        max_overlap=self.max_overlap, burst_gap=self.burst_gap)  # fmt: skip


@dataclasses.dataclass
class JobOutcome:
    slot: int
    kind: str
    namespace: str
    uid: str
    phase: str = ""
    status: Obj = dataclasses.field(default_factory=dict)
    violations: int = 0


class Soak:
    def __init__(
        self, cluster: LocalCluster, kubectl: Kubectl, work: Path, cfg: SoakConfig,
        kueue: Kueue | None = None,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.queues = Queues(kueue) if kueue is not None else None
        self.cluster, self.kubectl, self.work = cluster, kubectl, work
        self.ledger = Ledger()
        self.replicas = Replicas(cluster.control_plane.kubeconfig, work, cfg.peering_lifetime)
        self.histories: dict[tuple[str, str], inv.StatusHistory] = {}
        self.outcomes: list[JobOutcome] = []
        self.ended: dict[tuple[str, str], dt.datetime] = {}
        """(namespace, uid) → when the job was checked (before it was deleted)."""
        self.seen_ended: dict[tuple[str, str], float] = {}
        """(namespace, uid) → when (s since the start) the churn first saw it ended."""
        self.stop = threading.Event()
        self.ctx: Context | None = None
        self.alerts: Alerts | None = None
        self.latest: dict[tuple[str, str], Obj] = {}
        """(namespace, uid) → the job's status as last sampled (replaced, never changed)."""
        self.scrapes = 0
        """Scrapes of a replica that prometheus took (0 without alerts)."""

    # --- jobs -------------------------------------------------------------------------
    def submit(self, ctx: Context, slot: SlotJob) -> None:
        """The slot's next job, in a fresh namespace (with the LocalQueue of a queued
        kind when Kueue runs). A step an API server outage refused is done again at the
        next pass of the churn (`complete`): a slot never loses its job."""
        slot.namespace, slot.uid = "", ""
        slot.namespace = ctx.env.namespace(f"chaos-{slot.index}")
        ctx.namespaces.add(slot.namespace)
        self.complete(ctx, slot)

    def complete(self, ctx: Context, slot: SlotJob) -> None:
        """The rest of a submission, each step idempotent: the LocalQueue, the script's
        ConfigMap, the job, its uid."""
        ns = slot.namespace
        if ctx.queues is not None and jobkinds.queued(slot.kind):
            ctx.queues.add_local_queue(ctx.env, ns)
        if (
            slot.kind == jobkinds.SCRIPT
            and ctx.env.kubectl(
                "get", "configmap", SCRIPT_CONFIGMAP, "-n", ns, check=False
            ).returncode
        ):
            ctx.env.create_script_configmap(ns)
        ctx.env.kubectl.apply(jobkinds.document(slot.kind, ns))
        slot.uid = ctx.env.job(ns, jobkinds.JOB_NAME)["metadata"]["uid"]

    def finalize(self, ctx: Context, slot: SlotJob) -> None:
        """Check the slot's ended job, then delete it and its namespace; nothing of it
        may be left."""
        ns, uid = slot.namespace, slot.uid
        status = ctx.env.status(ns, jobkinds.JOB_NAME)
        self.ended[(ns, uid)] = dt.datetime.now(dt.UTC)
        job = inv.JobRef(ns, uid, slot.kind)
        hits = inv.settled(self.ledger.hits_of(ns, uid), status)
        low, _ = inv.expected_preemptions(hits)
        found = inv.check_phase(job, status, jobkinds.MAX_PREEMPTIONS, low)
        found += inv.check_counters(job, status, hits, self.ledger.suspensions.get((ns, uid), 0),
                                    any(f.kind == s.JOB_RECREATE and f.namespace == ns
                                        for f in self.ledger.faults))  # fmt: skip
        found += inv.check_trials(job, status, self.results(ns), jobkinds.known(slot.kind))
        found += self.delete(ns)
        self.ledger.add_violations(found)
        self.outcomes.append(JobOutcome(slot.index, slot.kind, ns, uid, str(status.get("phase")),
                                        status, len(found)))  # fmt: skip
        slot.namespace, slot.uid = "", ""

    def results(self, namespace: str) -> Obj | None:
        with contextlib.suppress(OSError, ValueError, RuntimeError, KeyError, TypeError):
            path = claim_dir(self.kubectl, namespace, jobkinds.JOB_NAME) / contract.RESULTS_FILE
            return dict(json.loads(path.read_text()))
        return None

    def delete(self, namespace: str) -> list[Violation]:
        """The job deleted; its pods (trainers, probes) and Workloads must go."""
        self.kubectl("delete", "tj", jobkinds.JOB_NAME, "-n", namespace, "--timeout=120s",
                     check=False)  # fmt: skip
        deadline = time.monotonic() + 90
        left: list[str] = []
        while time.monotonic() < deadline:
            left = self.leftovers(namespace)
            if not left:
                break
            time.sleep(2)
        self.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        return inv.check_leftovers(namespace, left)

    def leftovers(self, namespace: str) -> list[str]:
        pods = self.kubectl("get", "pods", "-n", namespace, "-l", JOB_LABEL, "-o", "name",
                            check=False).stdout.split()  # fmt: skip
        workloads = self.kubectl("get", "workloads.kueue.x-k8s.io", "-n", namespace, "-o",
                                 "name", check=False)  # fmt: skip
        return pods + (workloads.stdout.split() if workloads.returncode == 0 else [])

    # --- while it runs ----------------------------------------------------------------
    def sample(self, ctx: Context) -> None:
        """Every 3 s: each job's status against its history, the replicas' RSS."""
        while not self.stop.wait(3.0):
            for slot in list(ctx.slots):
                ns, uid = slot.namespace, slot.uid
                if not uid:
                    continue
                with contextlib.suppress(Exception):  # the API server may be down
                    status = ctx.env.status(ns, jobkinds.JOB_NAME)
                    key = (ns, uid)
                    history = self.histories.setdefault(
                        key, inv.StatusHistory(inv.JobRef(ns, uid, slot.kind))
                    )
                    if ctx.env.job(ns, jobkinds.JOB_NAME)["metadata"]["uid"] == uid:
                        self.ledger.add_violations(history.observe(status))
                        self.latest[key] = status
                        if self.alerts is not None:
                            self.alerts.observe(ns, status, ctx.now())
            self.replicas.sample_rss()
            if self.alerts is not None:
                self.alerts.poll(ctx.now())

    def inject(self, ctx: Context, planned: s.Planned) -> None:
        """One fault on its own thread: recorded whatever happens."""
        slot = ctx.slots[planned.slot]
        scoped = planned.kind not in s.CLUSTER_WIDE
        record = FaultRecord(planned.kind, planned.slot, planned.at,
                             slot.kind if scoped else matrix.ALL_JOBS,
                             slot.namespace, slot.uid, started=ctx.now())  # fmt: skip
        self.ledger.begin(record)
        wall = dt.datetime.now(dt.UTC)
        before = dict(self.latest)  # each job's last sampled status
        try:
            FAULTS[planned.kind](ctx, record, planned)
        except Exception as err:  # recorded: the soak goes on
            record.outcome, record.detail = ERROR, f"{type(err).__name__}: {err}"[:300]
        record.ended = ctx.now()
        self.ledger.add_fault(record)
        if record.outcome == INJECTED and record.hits:
            record.recovery_seconds, after = self.recovery(ctx, record, wall)
            hit = (record.hits[0].namespace, record.hits[0].uid)
            if after is not None and hit in before:
                record.steps_redone = matrix.steps_redone(before[hit], after)

    def recovery(
        self, ctx: Context, record: FaultRecord, since: dt.datetime
    ) -> tuple[float | None, Obj | None]:
        """Seconds from the fault to the hit job's next progress in its status (or its
        end, which the churn may see first and delete the job), and that status (None:
        seen ended); (None, None) if the job went (deleted, or re-created under its
        name) or nothing came within 600 s."""
        ns, uid = record.hits[0].namespace, record.hits[0].uid
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not self.stop.is_set():
            ended = self.ended.get((ns, uid))
            if ended is not None:
                return round(max(0.0, (ended - since).total_seconds()), 1), None
            try:
                job = ctx.env.job(ns, jobkinds.JOB_NAME)
            except AssertionError:  # not found
                return None, None
            except Exception:  # the API server may be down
                job = None
            if job is not None:
                if job["metadata"]["uid"] != uid:
                    return None, None
                status = job.get("status") or {}
                last = status.get("lastProgressTime")
                if status.get("phase") in FINISHED or (last and _parse(last) > since):
                    return round((dt.datetime.now(dt.UTC) - since).total_seconds(), 1), status
            time.sleep(2)
        return None, None

    def run_faults(self, ctx: Context, plan: list[s.Planned]) -> list[threading.Thread]:
        threads = []
        for planned in plan:
            delay = ctx.t0 + planned.at - time.monotonic()
            if self.stop.wait(max(0.0, delay)):
                break
            thread = threading.Thread(target=self.inject, args=(ctx, planned), daemon=True)
            thread.start()
            threads.append(thread)
        return threads

    # --- the whole run ----------------------------------------------------------------
    def churn(self, ctx: Context, until: float, resubmit: bool) -> None:
        """Until `until` (s since start) or every job has ended: each ended job is
        checked and, with `resubmit`, followed by a new one in its slot."""
        while ctx.now() < until:
            live = 0
            for slot in ctx.slots:
                if not slot.uid:
                    if slot.namespace or resubmit:  # a submission an outage cut short
                        with contextlib.suppress(Exception):
                            (self.complete if slot.namespace else self.submit)(ctx, slot)
                    continue
                live += 1
                with contextlib.suppress(Exception):
                    if self.ended_now(ctx, slot):
                        self.finalize(ctx, slot)
                        if resubmit:
                            self.submit(ctx, slot)
            if not live and not resubmit:
                return
            time.sleep(5)

    def ended_now(self, ctx: Context, slot: SlotJob) -> bool:
        """The slot's job has ended and no fault that began before that is still in
        progress (one may yet record the pod groups it hit: a node fault hits every
        job on the node, and records its victims only once they are known)."""
        key = (slot.namespace, slot.uid)
        if key not in self.seen_ended:
            if ctx.env.status(slot.namespace).get("phase") not in FINISHED:
                return False
            self.seen_ended[key] = ctx.now()
        return not self.ledger.in_progress_since(self.seen_ended[key])

    def run(self) -> Obj:
        cfg = self.cfg
        plan = s.plan(cfg.seed, cfg.limits(), cfg.fault_kinds)
        if cfg.alerts:
            self.alerts = Alerts(self.work / "prometheus")
            self.replicas.on_change = self.alerts.targets
        self.replicas.start()
        env = Env(self.cluster, self.kubectl, self.replicas.alive[0][0])
        kinds = jobkinds.job_mix(cfg.seed, cfg.jobs, cfg.job_kinds)
        ctx = Context(env, self.replicas, self.ledger, [SlotJob(i, k) for i, k in enumerate(kinds)],
                      time.monotonic(), self.queues)  # fmt: skip
        self.ctx = ctx
        env.kubectl.apply(provisioner.sized_class(jobkinds.STORAGE_CLASS))
        try:
            if self.queues is not None:
                self.queues.setup(env)
                ctx.t0 = time.monotonic()  # the schedule starts once the queues are up
            return self._run(ctx, plan)
        finally:
            self.stop.set()
            self.replicas.stop()
            if self.alerts is not None:
                self.alerts.stop()
            if self.queues is not None:
                self.queues.teardown(env)
            env.kubectl("delete", "storageclass", jobkinds.STORAGE_CLASS, check=False)

    def _run(self, ctx: Context, plan: list[s.Planned]) -> Obj:
        for slot in ctx.slots:
            self.submit(ctx, slot)
        sampler = threading.Thread(target=self.sample, args=(ctx,), daemon=True)
        sampler.start()
        injector: list[threading.Thread] = []
        feeder = threading.Thread(target=lambda: injector.extend(self.run_faults(ctx, plan)),
                                  daemon=True)  # fmt: skip
        feeder.start()
        window_end = self.cfg.duration - self.cfg.limits().tail
        self.churn(ctx, window_end, resubmit=True)
        feeder.join()
        for thread in injector:
            thread.join(timeout=600)
        self.churn(ctx, ctx.now() + self.cfg.settle_seconds, resubmit=False)
        unfinished = [sl for sl in ctx.slots if sl.uid]
        for slot in unfinished:
            self.ledger.add_violations([Violation("honest-phase", slot.namespace, slot.uid,
                                                  "not ended in time", slot.kind)])  # fmt: skip
            self.delete(slot.namespace)
        self.stop.set()
        sampler.join(timeout=30)
        for name, samples in self.replicas.rss.items():
            self.ledger.add_violations(inv.check_memory(samples, self.cfg.memory_limit_mib, name))
        if self.alerts is not None:
            self.alerts.poll(ctx.now(), force=True)  # the last word
            self.ledger.add_violations(alerts.check(self.alerts.fired, self.alerts.facts,
                                                    ctx.namespaces))  # fmt: skip
            self.scrapes = self.alerts.scrapes()
        return self.result(plan)

    def result(self, plan: list[s.Planned]) -> Obj:
        faults = sorted(self.ledger.faults, key=lambda f: f.started)
        return {
            "seed": self.cfg.seed,
            "config": {k: v for k, v in dataclasses.asdict(self.cfg).items()},
            "planned": len(plan),
            "overlapping": s.overlapping(plan),
            "not_built": list(s.NOT_BUILT),
            "faults": [f.to_json() for f in faults],
            "jobs": [dataclasses.asdict(o) for o in self.outcomes],
            "violations": [dataclasses.asdict(v) for v in self.ledger.violations],
            "rss_mib": {
                k: {"samples": len(v), "max": max(v, default=0)}
                for k, v in self.replicas.rss.items()
            },
            "matrix": matrix.build(faults, self.ledger.violations),
            "alerts_scrapes": self.scrapes,
            "alerts_fired": [
                {"alert": a, "namespace": ns, "first_seen": when}
                for (a, ns), when in sorted((self.alerts.fired if self.alerts else {}).items())
            ],
        }


def _parse(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
