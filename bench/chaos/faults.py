"""The soak's faults, one function per kind (its name in schedule.py), each through the
test harness's own means (tests/localcluster/disruption.py, the control plane, the
operator replicas, Kueue's manager and queues: bench/chaos/queues.py): it acts on the
job of its slot and records what it did, to which pod groups and when, in a FaultRecord.
The Kueue kinds record themselves skipped when the soak runs without Kueue."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client, watch
from tuneop.api import queue as kq

from bench.chaos import queues as q
from bench.chaos import schedule as s
from bench.chaos.jobkinds import JOB_NAME, document, queued
from bench.chaos.ledger import SKIPPED, FaultRecord, Hit, Ledger
from bench.chaos.replicas import Replicas
from tests.e2e.harness import Env, wait_for
from tests.localcluster import disruption

Obj = dict[str, Any]
JOB_LABEL = "tuneop.io/tuningjob"
PREEMPTOR_NAME = "chaos-preemptor"
FOLLOW_SECONDS = 90.0
"""How long a fault follows the pods it disrupted to their end (the soak's jobs have a
15-s grace period; a drain's or a preemption's victims end about together)."""
LIST_SECONDS = 60.0
"""How long a listing of the trainer pods is retried (an API server or etcd restart)."""
ADMIT_SECONDS = 120.0
"""How long a Kueue preemptor may take to be admitted: its victims' graceful ends (15 s),
Kueue's cycles, a restart of its manager in between."""


@dataclasses.dataclass
class SlotJob:
    """The job a slot runs now: its kind, namespace and uid (a new uid after a
    re-creation under its name)."""

    index: int
    kind: str
    namespace: str = ""
    uid: str = ""


@dataclasses.dataclass
class Context:
    """What a fault acts through."""

    env: Env
    replicas: Replicas
    ledger: Ledger
    slots: list[SlotJob]
    t0: float
    queues: q.Queues | None = None
    """Kueue's manager and the soak's queues; None: the soak runs without Kueue."""
    namespaces: set[str] = dataclasses.field(default_factory=set)
    """Every namespace the soak made for its jobs: faults act on their pods only (on a
    shared cluster, other pods on a node are not the soak's)."""

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 2)


def trainer_pods(ctx: Context, namespace: str | None = None, node: str | None = None) -> list[Obj]:
    """The trainer pods (and probes) of the soak's jobs, in `namespace` or all, on `node`
    or any."""
    args = ["get", "pods", "-l", JOB_LABEL]
    args += ["-n", namespace] if namespace else ["-A"]
    if node:
        args += ["--field-selector", f"spec.nodeName={node}"]
    # through an API server outage: a fault's victims unlisted go uncounted
    items = through_outage(lambda: ctx.env.kubectl.json(*args)["items"], LIST_SECONDS)
    return [p for p in items if p["metadata"]["namespace"] in ctx.namespaces]


T = TypeVar("T")


def through_outage(call: Callable[[], T], seconds: float) -> T:
    """`call()`, again every 2 s while it raises (an API server or etcd restart), for
    up to `seconds`; then its error."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def hit(pod: Obj, exit_code: int | None = None, queue: bool = False) -> Hit:
    """The pod group `pod` belongs to, and whether this disruption must be counted: the
    pod was running, nobody was deleting it, and its trainer did not end its search
    under the signal (`exit_code` 0, so the operator rightly saw a success; None: not
    seen). `queue`: Kueue evicted it."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    owner = next((o["uid"] for o in meta.get("ownerReferences") or []
                  if o.get("kind") == "TuningJob"), "")  # fmt: skip
    running = (pod.get("status") or {}).get("phase") == "Running"
    return Hit(
        meta["namespace"],
        owner,
        labels.get("tuneop.io/group", "trainer"),
        labels.get("tuneop.io/attempt", ""),
        clean=running and not meta.get("deletionTimestamp") and exit_code != 0,
        queue=queue,
        exit_seen=exit_code is not None,
    )


def followed_hits(
    ctx: Context, pods: list[Obj], timeout: float = FOLLOW_SECONDS, queue: bool = False
) -> list[Hit]:
    """The hits of `pods` (each listed before it was disrupted), once each has ended or
    `timeout` passed: a trainer that exited 0 meanwhile was finishing its search, and
    whether its disruption counts is a race the soak cannot call."""
    deadline = time.monotonic() + timeout
    return [hit(p, _exit_code(ctx, p, max(1.0, deadline - time.monotonic())), queue)
            for p in pods]  # fmt: skip


def _exit_code(ctx: Context, pod: Obj, timeout: float) -> int | None:
    """How `pod`'s trainer ended before the pod was gone: 0 if every main container
    exited 0, else the first non-zero code; None if no end was seen (SIGKILLed with the
    pod, or the watch broke: an API server restart). A watch from the listing's
    resourceVersion sees each status it went through."""
    meta = pod["metadata"]
    core = ctx.env.cluster.core
    code: int | None = None
    with contextlib.suppress(Exception):  # whatever broke the watch: not seen
        stream = watch.Watch().stream(
            core.list_namespaced_pod, meta["namespace"],
            field_selector=f"metadata.name={meta['name']}",
            resource_version=meta.get("resourceVersion"), timeout_seconds=int(timeout),
        )  # fmt: skip
        for event in stream:
            obj = event["object"]
            if obj.metadata.uid != meta["uid"] or event["type"] == "DELETED":
                break
            codes = [(c.state.terminated.exit_code if c.state and c.state.terminated else None)
                     for c in obj.status.container_statuses or []]  # fmt: skip
            if codes and all(c is not None for c in codes):
                code = next((c for c in codes if c != 0), 0)
    return code


def _job_phase(ctx: Context, slot: SlotJob) -> str | None:
    job = ctx.env.kubectl.job(slot.namespace, JOB_NAME) if slot.namespace else None
    return None if job is None else str((job.get("status") or {}).get("phase") or "")


def live_pods(ctx: Context, record: FaultRecord, slot: SlotJob) -> list[Obj]:
    """The slot's running trainer pods; [] (and the record skipped) when there is none."""
    phase = _job_phase(ctx, slot)
    if phase in (None, "Succeeded", "Failed"):
        return skip(record, f"job {phase or 'absent'}")
    pods = [
        p for p in trainer_pods(ctx, slot.namespace) if not p["metadata"].get("deletionTimestamp")
    ]
    return pods or skip(record, "no live trainer pod")


def skip(record: FaultRecord, why: str) -> list[Obj]:
    record.outcome, record.detail = SKIPPED, why
    return []


def _rng(record: FaultRecord) -> random.Random:
    return random.Random(f"{record.kind}/{record.slot}/{record.planned_at}")


def pod_fault(grace: int | None, evict: bool) -> Callable[[Context, FaultRecord, s.Planned], None]:
    """A trainer pod deleted (grace 0: SIGKILL; None: its own grace, SIGTERM) or evicted."""

    def inject(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
        slot = ctx.slots[planned.slot]
        pods = live_pods(ctx, record, slot)
        if not pods:
            return
        pod = _rng(record).choice(pods)
        name = pod["metadata"]["name"]
        api = ctx.env.cluster.api
        if evict:
            disruption.evict_pod(api, slot.namespace, name)
        else:
            disruption.delete_pod(api, slot.namespace, name, grace)
        record.detail = name
        record.hits.extend(followed_hits(ctx, [pod]))

    return inject


def _node_of(ctx: Context, record: FaultRecord, planned: s.Planned) -> str | None:
    pods = [p for p in live_pods(ctx, record, ctx.slots[planned.slot]) if p["spec"].get("nodeName")]
    if not pods:
        return None
    node = str(_rng(record).choice(pods)["spec"]["nodeName"])
    if node not in ctx.env.cluster.agents:
        skip(record, f"node {node} is not a node agent's")
        return None
    return node


def _hit_node(ctx: Context, record: FaultRecord, pods: list[Obj], follow: bool) -> None:
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    record.hits.extend(followed_hits(ctx, live) if follow else [hit(p) for p in live])


def scheduler_preempt(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """A pod of a higher PriorityClass needing every GPU of the job's node: the
    scheduler preempts the trainers there; the victims are those gone or terminating once
    it is bound. Held `hold` s, then deleted."""
    node = _node_of(ctx, record, planned)
    if node is None:
        return
    api, ns = ctx.env.cluster.api, ctx.slots[planned.slot].namespace
    before = {p["metadata"]["uid"]: p for p in trainer_pods(ctx, node=node)}
    try:
        gpus = int(ctx.env.cluster.core.read_node(node).status.allocatable["nvidia.com/gpu"])
        name = disruption.preempt_with_priority(api, ns, gpus, name=PREEMPTOR_NAME, node=node)
    except Exception:  # cut by an outage, the preemptor may yet have been made
        record.hits.extend(dataclasses.replace(hit(p), clean=False) for p in before.values())
        q.retried(ctx.env, q.RESTORE_SECONDS, "delete", "pod", PREEMPTOR_NAME, "-n", ns,
                  "--grace-period=0", "--wait=false", "--ignore-not-found")  # fmt: skip
        raise
    try:
        bound = _wait_quietly(lambda: _bound(ctx, ns, name), planned.hold + 30)
        now = {p["metadata"]["uid"]: p for p in trainer_pods(ctx, node=node)}
        victims = [p for uid, p in before.items()
                   if uid not in now or now[uid]["metadata"].get("deletionTimestamp")]  # fmt: skip
        held_since = time.monotonic()
        _hit_node(ctx, record, victims, follow=True)
        record.detail = f"node {node}, preemptor bound: {bool(bound)}"
        _hold(planned, held_since)
    finally:  # retried through an API server outage: left, it would hold the node
        q.retried(ctx.env, q.RESTORE_SECONDS, "delete", "pod", name, "-n", ns,
                  "--grace-period=0", "--wait=false", "--ignore-not-found")  # fmt: skip


def _hold(planned: s.Planned, since: float) -> None:
    """The rest of the fault's `hold` from `since` (following its victims took some of
    it): the schedule keeps faults of one group apart by their holds."""
    time.sleep(max(0.0, planned.hold - (time.monotonic() - since)))


def _bound(ctx: Context, namespace: str, name: str) -> bool:
    pod = ctx.env.cluster.pod(namespace, name)
    return bool(pod is not None and pod.spec.node_name)


def _wait_quietly(predicate: Callable[[], Any], timeout: float) -> Any:
    try:
        return wait_for(predicate, timeout, "", every=1.0)
    except TimeoutError:
        return None


def node_crash(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """The job's node crashes (its pods' processes SIGKILLed, no heartbeat); it comes
    back once the taint manager has marked its pods for deletion, at least `hold` s
    later (back sooner, its pods would restart under restartPolicy Never: no loss)."""
    node = _node_of(ctx, record, planned)
    if node is None:
        return
    pods = trainer_pods(ctx, node=node)
    _hit_node(ctx, record, pods, follow=False)  # SIGKILLed: nothing to follow
    disruption.crash_node(ctx.env.cluster, node)
    try:
        uids = {p["metadata"]["uid"] for p in pods}
        late = _while_down(ctx, node, uids, planned.hold)
    finally:
        disruption.recover_node(ctx.env.cluster, node)
    # bound to the dead node before it was found unreachable, lost with it unstarted: the
    # operator may count such a group or not
    record.hits.extend(dataclasses.replace(hit(p), clean=False) for p in late.values())
    record.detail = f"node {node}, {len(pods)} pod(s), {len(late)} bound while down"


CRASH_MARK_SECONDS = 180.0
"""How long a crashed node stays down at most waiting for the taint manager to mark its
pods (the node controller's grace period, then the eviction)."""


def _while_down(ctx: Context, node: str, uids: set[str], hold: float) -> dict[str, Obj]:
    """Polls the crashed `node` every second until its pods `uids` are all marked for
    deletion (or CRASH_MARK_SECONDS passed) and `hold` s passed; returns the soak's pods
    the scheduler bound to it meanwhile (uid → pod)."""
    late: dict[str, Obj] = {}
    started, marked = time.monotonic(), False
    while True:
        with contextlib.suppress(Exception):  # a listing lost to an outage: poll again
            on_node = trainer_pods(ctx, node=node)
            late.update((p["metadata"]["uid"], p) for p in on_node
                        if p["metadata"]["uid"] not in uids)  # fmt: skip
            marked = all(p["metadata"].get("deletionTimestamp") for p in on_node
                         if p["metadata"]["uid"] in uids)  # fmt: skip
        elapsed = time.monotonic() - started
        if (marked or elapsed > CRASH_MARK_SECONDS) and elapsed >= hold:
            return late
        time.sleep(1.0)


def node_drain(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """`kubectl drain`'s two steps: cordon, evict every trainer pod there; uncordoned
    `hold` s later."""
    node = _node_of(ctx, record, planned)
    if node is None:
        return
    kubectl = ctx.env.kubectl
    kubectl("cordon", node)
    try:
        pods = [
            p for p in trainer_pods(ctx, node=node) if not p["metadata"].get("deletionTimestamp")
        ]
        evicted = []
        for pod in pods:
            meta = pod["metadata"]
            try:
                disruption.evict_pod(ctx.env.cluster.api, meta["namespace"], meta["name"])
                evicted.append(pod)
            except client.ApiException as err:
                if err.status != 404:
                    raise
        held_since = time.monotonic()
        _hit_node(ctx, record, evicted, follow=True)
        record.detail = f"node {node}, {len(record.hits)} evicted"
        _hold(planned, held_since)
    finally:  # retried through an API server outage: left cordoned, the node is lost
        q.retried(ctx.env, q.RESTORE_SECONDS, "uncordon", node)


def apiserver_restart(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """kube-apiserver SIGKILLed, started again `hold` s later."""
    ctx.env.cluster.control_plane.restart_apiserver(down_seconds=planned.hold)
    record.detail = f"down {planned.hold} s"


def etcd_restart(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """etcd SIGKILLed, started again on its data `hold` s later: the API server answers
    errors meanwhile, and every watch is cut."""
    ctx.env.cluster.control_plane.restart_etcd(down_seconds=planned.hold)
    record.detail = f"down {planned.hold} s"


def operator_kill(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """The leading replica SIGKILLed; the standby leads; the killed one returns as standby."""
    took = ctx.replicas.kill_active()
    record.detail = f"standby led after {took:.1f} s"


def progress_configmap_delete(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    slot = ctx.slots[planned.slot]
    if _job_phase(ctx, slot) in (None, "Succeeded", "Failed"):
        skip(record, "job finished or absent")
        return
    ctx.env.kubectl("delete", "cm", f"{JOB_NAME}-progress", "-n", slot.namespace, check=False)
    record.detail = f"{JOB_NAME}-progress"


def _patch_suspend(ctx: Context, namespace: str, value: bool) -> None:
    body = json.dumps({"spec": {"suspend": value}})
    ctx.env.kubectl("patch", "tj", JOB_NAME, "-n", namespace, "--type=merge", "-p", body)


def suspend_resume(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """spec.suspend set, the job Suspended (its pods gone), `hold` s, then unset."""
    slot = ctx.slots[planned.slot]
    if not live_pods(ctx, record, slot):
        return
    ns, uid = slot.namespace, slot.uid
    _patch_suspend(ctx, ns, True)
    ctx.ledger.suspended(ns, uid)
    try:
        _wait_quietly(lambda: _job_phase(ctx, slot) in ("Suspended", "Succeeded", "Failed"), 120)
        time.sleep(planned.hold)
    finally:  # retried through an API server outage: left suspended, the job never ends
        body = json.dumps({"spec": {"suspend": False}})
        q.retried(ctx.env, q.RESTORE_SECONDS, "patch", "tj", JOB_NAME, "-n", ns,
                  "--type=merge", "-p", body)  # fmt: skip
    record.detail = f"suspended {planned.hold} s"


def job_recreate(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """The job deleted (its claim stays) and applied again under its name, adopting the
    search on the claim: a new job (uid) that continues it."""
    slot = ctx.slots[planned.slot]
    if not live_pods(ctx, record, slot):
        return
    ns = slot.namespace
    ctx.env.kubectl("delete", "tj", JOB_NAME, "-n", ns, "--timeout=120s")

    def apply_again() -> str:
        ctx.env.kubectl.apply(document(slot.kind, ns, adopt=True))
        return str(ctx.env.job(ns, JOB_NAME)["metadata"]["uid"])

    # through an API server outage: left deleted, the slot would wait on a job that is gone
    old, slot.uid = slot.uid, through_outage(apply_again, q.RESTORE_SECONDS)
    record.detail = f"uid {old} -> {slot.uid}"


def _queued_job(ctx: Context, record: FaultRecord, slot: SlotJob) -> q.Queues | None:
    """The soak's queues when the slot's job is a queued one still running; None (and
    the record skipped, with why) otherwise."""
    if ctx.queues is None:
        skip(record, "no Kueue in this soak")
        return None
    if not queued(slot.kind):
        skip(record, f"a {slot.kind} job is not queued")
        return None
    phase = _job_phase(ctx, slot)
    if phase in (None, "Succeeded", "Failed"):
        skip(record, f"job {phase or 'absent'}")
        return None
    return ctx.queues


def queued_slot(ctx: Context, record: FaultRecord, planned: s.Planned) -> SlotJob:
    """The planned slot if its job is a queued kind, else the first slot running one (a
    Kueue fault acts on the queue, which any queued job feels), the record moved to
    that job; the planned slot when none is."""
    planned_slot = ctx.slots[planned.slot]
    if queued(planned_slot.kind):
        return planned_slot
    slot = next((sl for sl in ctx.slots if queued(sl.kind) and sl.uid), planned_slot)
    if slot is not planned_slot:
        record.slot, record.job_kind = slot.index, slot.kind
        record.namespace, record.uid = slot.namespace, slot.uid
    return slot


def _admitted_pods(ctx: Context, record: FaultRecord, slot: SlotJob) -> list[Obj]:
    """The slot's trainer pods Kueue admitted (no gate) and running; [] (and the record
    skipped) when there is none."""
    if _queued_job(ctx, record, slot) is None:
        return []
    live = live_pods(ctx, record, slot)
    admitted = [p for p in live if not kq.gated(p)
                and (p.get("status") or {}).get("phase") == "Running"]  # fmt: skip
    if live and not admitted:
        return skip(record, "no admitted trainer pod running (queued or starting)")
    return admitted


def kueue_preempt(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """A pod of a higher priority in the soak's ClusterQueue asking for the GPUs left free
    plus the job's (tests/e2e/test_queue.py's holding pod of a higher class): Kueue
    evicts lower priorities to admit it, the most recently admitted first
    (CandidatesOrdering, pkg/scheduler/preemption/common in Kueue v0.17), so the victims
    may be another queued job's. They are the queued trainer pods Kueue marks until the
    preemptor is admitted; it is held `hold` s from then, then deleted. The operator
    counts each group evicted in `preemptions` and in `queueEvictions`."""
    slot = queued_slot(ctx, record, planned)
    pods = _admitted_pods(ctx, record, slot)
    if not pods or ctx.queues is None:
        return
    queues, env, core = ctx.queues, ctx.env, ctx.env.cluster.core
    seen = q.watch_from(core)
    gpus = queues.free_gpus(env) + sum(q.pod_gpus(p) for p in pods)
    name = queues.create_preemptor(env, gpus)
    try:
        q.watch_evictions(core, seen, (queues.namespace, name), ADMIT_SECONDS, planned.hold)
    finally:
        queues.delete_preemptor(env, name)
    admitted = seen.admitted
    q.watch_evictions(core, seen, None, 10.0, 0.0)  # an eviction issued just before the delete
    record.hits.extend(followed_hits(ctx, list(seen.victims.values()), queue=True))
    record.detail = (
        f"preemptor of {gpus} GPU(s) admitted: {admitted}; {len(seen.victims)} pod(s) evicted"
        + (f"; {seen.broken}" if seen.broken else "")
    )


def kueue_controller_restart(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """Kueue's manager stopped, started again `hold` s later (queues.restart_manager: its
    webhooks stay registered, so pod creates and updates in the jobs' namespaces are
    refused meanwhile and the operator retries them). Adds to no counter: admissions
    are Workload objects, read back when it starts."""
    if ctx.queues is None:
        skip(record, "no Kueue in this soak")
        return
    starts = q.restart_manager(ctx.queues.kueue, planned.hold)
    record.detail = f"down {planned.hold} s, back after {starts} start(s)"


def quota_shrink(ctx: Context, record: FaultRecord, planned: s.Planned) -> None:
    """The ClusterQueue's GPU nominalQuota lowered to 0, restored `hold` s later. Kueue
    v0.17 evicts no admitted workload for that (none of its Workload eviction reasons is
    a quota lowered: apis/kueue/v1beta2/workload_types.go), and the queued jobs share one
    priority, so none preempts another: running groups go on, a group created meanwhile
    (after a disruption, a new job) stays Queued until the quota is back. Adds to no
    counter."""
    queues = _queued_job(ctx, record, queued_slot(ctx, record, planned))
    if queues is None:
        return
    queues.set_quota(ctx.env, 0)
    try:
        time.sleep(planned.hold)
    finally:
        queues.set_quota(ctx.env, queues.gpus, timeout=q.RESTORE_SECONDS)
    record.detail = f"GPU quota {queues.gpus} -> 0 for {planned.hold} s"
