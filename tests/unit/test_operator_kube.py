"""The API layer's requests (fences: uid preconditions, resourceVersion) built against a
FAKE ApiClient that records what would go on the wire, and the ownership rules of the
executor (409s and cleanup) against a FAKE Kube holding objects in memory."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import re
from typing import Any

import pytest
from tuneop.act import executor, kube
from tuneop.api import names, queue
from tuneop.api import status as st
from tuneop.decide.patch import Decision
from tuneop.decide.refusal import CHILD_CONFLICT, POD_REJECTED
from tuneop.render import children, trainer_pods
from tuneop.run import handlers, health, metrics
from tuneop.run import runtime as runtime_mod
from tuneop.run.config import Config
from tuneop.run.runtime import Runtime
from tuneop.run.watched import RESYNC_SECONDS, Watched
from tuneop_contract.spec import JobSpec

from tests.unit.fakes import (
    JOB,
    LOG,
    QUOTA_REFUSAL,
    Clock,
    FakeApiClient,
    FakeKube,
    kube_on,
    stored_object,
)


def test_every_call_is_bounded_by_the_request_timeout():
    api = FakeApiClient(200, {"items": []})
    kube_on(api).list_pods("ns", "j")
    assert api.sent[0][3]["_request_timeout"] == 12.5


def test_a_pod_delete_carries_the_uid_it_was_decided_about():
    api = FakeApiClient()
    assert kube_on(api).delete("Pod", "ns", "j-worker-0", uid="pod-uid-1")
    method, path, body, _ = api.sent[0]
    assert (method, path) == ("DELETE", "/api/v1/namespaces/ns/pods/j-worker-0")
    assert body["preconditions"] == {"uid": "pod-uid-1"}


def test_a_failed_precondition_means_a_successor_and_deletes_nothing():
    api = FakeApiClient(409, {"message": "Precondition failed: UID in precondition"})
    assert not kube_on(api).delete("Pod", "ns", "j-worker-0", uid="old")
    with pytest.raises(kube.ApiError):  # without a uid a 409 is a real error
        kube_on(api).delete("Pod", "ns", "j-worker-0")


def test_the_ttl_deletion_carries_the_uid_of_the_job_read():
    """ttlSecondsAfterFinished deletes the job the pass read, never a job deleted and
    re-created under its name since: the delete names the uid read, so the API server
    refuses it (409) for the successor, which is left alone."""
    api = FakeApiClient()
    executor.apply(kube_on(api), JOB, Decision(delete_job=True))
    ((method, path, body, _),) = api.sent
    assert (method, path) == ("DELETE", "/apis/tuneop.io/v1alpha1/namespaces/ns/tuningjobs/j")
    assert body["preconditions"] == {"uid": JOB["metadata"]["uid"]}
    successor = FakeApiClient(409, {"message": "Precondition failed: UID in precondition"})
    executor.apply(kube_on(successor), JOB, Decision(delete_job=True))
    assert [m for m, *_ in successor.sent] == ["DELETE"]  # refused, and no error


def test_the_status_patch_is_fenced_by_the_resource_version_read():
    api = FakeApiClient(200, {})
    kube_on(api).patch_status("ns", "j", {"attempt": 2}, resource_version="7")
    method, path, body, _ = api.sent[0]
    assert (method, path) == ("PATCH", "/apis/tuneop.io/v1alpha1/namespaces/ns/tuningjobs/j/status")
    assert body == {"status": {"attempt": 2}, "metadata": {"resourceVersion": "7"}}


def test_a_409_on_the_jobs_own_child_is_fine_and_on_someone_elses_a_conflict():
    mine = FakeKube({("ConfigMap", "j-spec"): stored_object("ConfigMap", "j-spec", "u")}, job=JOB)
    for read_first in (False, True):
        assert (
            executor.ensure_child(
                mine, JOB, children.build_configmap(JOB, JobSpec.from_dict(JOB["spec"])), read_first
            )
            == mine.objects[("ConfigMap", "j-spec")]
        )
    for owner in ("older-job-uid", None):  # an older job's, or a user's own object
        theirs = FakeKube(
            {("ServiceAccount", "j-trainer"): stored_object("ServiceAccount", "j-trainer", owner)},
            job=JOB,
        )
        for read_first in (False, True):
            with pytest.raises(
                kube.ChildConflict, match="ServiceAccount j-trainer exists and is not owned"
            ):
                executor.ensure_child(theirs, JOB, children.build_service_account(JOB), read_first)


def test_a_retained_claim_of_this_job_name_is_reused():
    labels = names.job_labels("j")
    claim = stored_object("PersistentVolumeClaim", "j-ckpt", None, **labels)
    fake = FakeKube({("PersistentVolumeClaim", "j-ckpt"): claim}, job=JOB)
    spec = JobSpec.from_dict({**JOB["spec"], "checkpoint": {"reclaimPolicy": "Retain"}})
    pvc = children.build_pvc(JOB, spec)
    assert pvc is not None and executor.ensure_child(fake, JOB, pvc) is claim


def test_a_pod_of_an_older_job_of_the_same_name_is_waited_for_not_adopted():
    spec = JobSpec.from_dict(JOB["spec"])
    old = stored_object("Pod", "j-worker-0", "older-job-uid", **{names.LABEL_ATTEMPT: "0"})
    fake = FakeKube({("Pod", "j-worker-0"): old}, job=JOB)
    with pytest.raises(executor.StaleGroup, match="another TuningJob"):
        executor.create_pod(fake, JOB, trainer_pods.build_pod(JOB, spec, 0, 0))


def test_cleanup_deletes_only_what_the_job_owns_and_only_that_object():
    objects = {
        ("Pod", "j-worker-0"): stored_object("Pod", "j-worker-0", "u", uid="p1"),
        ("Pod", "j-worker-1"): stored_object("Pod", "j-worker-1", "older-job-uid", uid="p2"),
        ("ConfigMap", "j-spec"): stored_object("ConfigMap", "j-spec", "u", uid="c1"),
        ("ConfigMap", "j-progress"): stored_object("ConfigMap", "j-progress", "u", uid="c2"),
        ("ServiceAccount", "j-trainer"): stored_object(
            "ServiceAccount", "j-trainer", None, uid="s1"
        ),
        ("Role", "j-trainer"): stored_object("Role", "j-trainer", "newer-job-uid", uid="r1"),
        ("PersistentVolumeClaim", "j-ckpt"): stored_object(
            "PersistentVolumeClaim", "j-ckpt", "u", uid="v1"
        ),
    }
    objects[("Pod", "j-worker-0")]["metadata"]["finalizers"] = [queue.FINALIZER]  # Kueue's
    fake = FakeKube(dict(objects), job=JOB)
    job = {**JOB, "spec": {**JOB["spec"], "checkpoint": {"reclaimPolicy": "Delete"}}}
    executor.cleanup(fake, job, LOG)
    assert fake.released == [("j-worker-0", "p1")]  # its Workload's quota freed at once
    assert sorted(fake.deleted) == [
        ("ConfigMap", "j-progress", "c2"),
        ("ConfigMap", "j-spec", "c1"),
        ("PersistentVolumeClaim", "j-ckpt", "v1"),
        ("Pod", "j-worker-0", "p1"),
    ]
    assert ("ServiceAccount", "j-trainer") in fake.objects and ("Role", "j-trainer") in fake.objects


def test_a_conflict_is_surfaced_in_status_and_one_event():
    taken = stored_object("ServiceAccount", "j-trainer", None)
    fake = FakeKube({("ServiceAccount", "j-trainer"): taken}, job=JOB)
    runtime = Runtime(Config.from_env({}), fake)
    runtime.reconcile_once("ns", "j", LOG)
    assert fake.patches and CHILD_CONFLICT in json.dumps(fake.patches[-1]["conditions"])
    assert "ServiceAccount j-trainer exists" in fake.patches[-1]["message"]
    assert fake.events == [CHILD_CONFLICT]
    assert not [k for k in fake.objects if k[0] == "Pod"]  # no pods created beside it
    # the next passes meet the same conflict: no second Event, and nothing logged through
    # kopf's per-object logger (each of its warnings would be an Event)
    kopf_logger = EventPostingLogger()
    fake.job = written(JOB, fake.patches[-1])
    for _ in range(3):
        runtime.reconcile_once("ns", "j", kopf_logger)
    assert fake.events == [CHILD_CONFLICT] and kopf_logger.posted == []


def written(job: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """`job` as the API server holds it once `status` is written: a newer version."""
    meta = job["metadata"]
    version = str(int(meta["resourceVersion"]) + 1)
    return {**job, "metadata": {**meta, "resourceVersion": version}, "status": status}


def _stalled_gauge(namespace: str, name: str) -> tuple[float, str] | None:
    """The job's tuneop_tuningjob_stalled sample: value and reason label."""
    for family in metrics.JOBS.collect():
        for sample in family.samples:
            job = (sample.labels.get("namespace"), sample.labels.get("tuningjob"))
            if sample.name == "tuneop_tuningjob_stalled" and job == (namespace, name):
                return float(sample.value), sample.labels["reason"]
    return None


def test_pods_refused_past_the_pending_timeout_stall_the_job_once_and_are_exported():
    fake = FakeKube({}, job=JOB, refuse_pods=QUOTA_REFUSAL)
    runtime = Runtime(Config.from_env({}), fake)
    runtime.reconcile_once("ns", "j", LOG)
    (first,) = fake.patches
    running = next(c for c in first["conditions"] if c["type"] == "Running")
    assert running["reason"] == POD_REJECTED and fake.events == [POD_REJECTED]
    assert not [c for c in first["conditions"] if c["type"] == "Stalled" and c["status"] == "True"]
    assert _stalled_gauge("ns", "j") == (0.0, "")  # exported although nothing was applied
    # still refused, 601 s after the first refusal (pendingTimeoutSeconds 600)
    long_ago = st.rfc3339(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=601))
    refused = {**first["podsRefused"], "since": long_ago}
    fake.job = written(JOB, {**first, "podsRefused": refused})
    runtime.reconcile_once("ns", "j", LOG)
    stalled = next(c for c in fake.patches[-1]["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == POD_REJECTED
    # 601 s back at whole seconds, read a moment later
    assert re.search(r"PodRejected for 60[12]s \(pendingTimeoutSeconds=600\)", stalled["message"])
    assert "exceeded quota: gpus" in stalled["message"]
    assert fake.events == [POD_REJECTED, "Stalled"]
    assert _stalled_gauge("ns", "j") == (1.0, POD_REJECTED)
    # once stalled with that reason: no new patch, no new Event
    fake.job = written(fake.job, {**fake.job["status"], **fake.patches[-1]})  # merged
    patches = len(fake.patches)
    runtime.reconcile_once("ns", "j", LOG)
    assert len(fake.patches) == patches and fake.events == [POD_REJECTED, "Stalled"]
    assert _stalled_gauge("ns", "j") == (1.0, POD_REJECTED)
    metrics.JOBS.forget("ns", "j")


def test_failed_passes_back_off_exponentially_up_to_the_cap_with_jitter():
    def delays(draw: float) -> list[float]:
        return [handlers.retry_delay(n, 2.0, 60.0, lambda: draw) for n in range(8)]

    # the whole backoff at the top of the draw, half of it at the bottom
    assert delays(1.0) == [2.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert delays(0.0) == [2.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert handlers.retry_delay(10_000, 2.0, 60.0, lambda: 1.0) == 60.0
    # with the real draw, jobs failing together spread their retries over the window
    spread = {handlers.retry_delay(5, 2.0, 60.0) for _ in range(50)}
    assert len(spread) > 40 and all(16.0 <= d <= 32.0 for d in spread)
    assert handlers.retry_delay(0, 2.0, 60.0) == 2.0  # healthy: the interval, no jitter


class FailingRuntime:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def run_pass(self, namespace: str, name: str, logger: Any) -> None:
        raise self.error


class EventPostingLogger(logging.Logger):
    """Stands in for kopf's per-object logger, which posts each warning as an Event."""

    def __init__(self) -> None:
        super().__init__("kopf.objects.fake")
        self.posted: list[str] = []

    def _log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        if level >= logging.WARNING:
            self.posted.append(str(msg))


@pytest.mark.parametrize(
    ("error", "after"),
    [
        (kube.ApiError(500, "{}", "GET", "/x"), 3),
        (TimeoutError("read timed out"), 3),
        (kube.ApiError(409, "{}", "PATCH", "/x"), 0),  # the job changed: re-read, no backoff
        (executor.StaleGroup("old pod"), 0),
    ],
)
def test_a_failed_pass_counts_towards_backoff_without_an_event(error: Exception, after: int):
    kopf_logger = EventPostingLogger()
    runtime: Any = FailingRuntime(error)
    loops = health.LoopHealth()
    passed = asyncio.run(handlers._pass(runtime, "ns", "j", kopf_logger, 2, loops))
    assert passed == (after, 0.0)  # a next pass soon (the loop floors it)
    assert kopf_logger.posted == []
    assert loops.report()["failing"] == ({"ns/j": 1} if after else {})


def _running_job(**status: Any) -> dict[str, Any]:
    spec = {**JOB["spec"], "distribution": {"workers": 1}}
    return {**JOB, "spec": spec, "status": {"attempt": 0, "attemptStarted": True, **status}}


def test_a_running_job_is_read_with_its_pods_nodes_and_a_finished_one_rests():
    spec = JobSpec.from_dict(_running_job()["spec"])
    pod = trainer_pods.build_pod(JOB, spec, 0, 0)
    pod["spec"]["nodeName"] = "n1"
    pod["status"] = {"phase": "Running"}
    running = FakeKube({("Pod", "j-worker-0"): pod}, job=_running_job(phase="Running"))
    running.stores_status = True
    config = Config.from_env({})
    runtime = Runtime(config, running)
    assert runtime.reconcile_once("ns", "j", LOG) == 0.0  # its status changed: again soon
    # settled, nothing due (no stall timeout, no GPUs to account): the resync's pass next
    assert runtime.reconcile_once("ns", "j", LOG) == config.resync_seconds
    assert running.nodes == ["n1"]
    done = {"phase": "Succeeded", "completionTime": "2026-01-01T00:00:00Z"}
    finished = FakeKube({("Pod", "j-worker-0"): pod}, job=_running_job(**done))
    idle = Runtime(Config.from_env({}), finished).reconcile_once("ns", "j", LOG)
    assert idle == runtime_mod.FINISHED_RECHECK_SECONDS and finished.nodes == []
    job = _running_job(**done)
    job["spec"]["ttlSecondsAfterFinished"] = 10**9  # long, but its end is what wakes it
    ttl = FakeKube({}, job=job)
    idle = Runtime(Config.from_env({}), ttl).reconcile_once("ns", "j", LOG)
    assert idle == runtime_mod.FINISHED_RECHECK_SECONDS
    job["spec"]["ttlSecondsAfterFinished"] = 1
    job["status"]["completionTime"] = kube.dt.datetime.now(kube.dt.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    idle = Runtime(Config.from_env({}), FakeKube({}, job=job)).reconcile_once("ns", "j", LOG)
    assert idle is not None and 0 < idle <= 1


def test_a_node_read_serves_every_pass_until_the_resync():
    """A node the watch has not named is read live once and then serves every pass (of
    this job or of others on it) until the resync interval, as a watched one does."""
    spec = JobSpec.from_dict(_running_job()["spec"])
    pod = trainer_pods.build_pod(JOB, spec, 0, 0)
    pod["spec"]["nodeName"] = "n1"
    pod["status"] = {"phase": "Running"}
    fake = FakeKube({("Pod", "j-worker-0"): pod}, job=_running_job(phase="Running"))
    clock = Clock()
    runtime = Runtime(Config.from_env({}), fake, Watched(clock=clock))
    for _ in range(3):
        runtime.reconcile_once("ns", "j", LOG)
        clock.now += 1.0
    assert fake.nodes == ["n1"]
    clock.now += RESYNC_SECONDS
    runtime.reconcile_once("ns", "j", LOG)
    assert fake.nodes == ["n1", "n1"]  # a relist reports no deleted node: read it again


class Stopped:
    """Stands in for kopf's async daemon stopper (`bool(stopped)`, `await stopped.wait()`)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


def test_the_daemon_pause_ends_on_a_trigger_a_stop_or_its_time():
    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        took = []
        for wake in ("trigger", "stop", None):
            stopped, trigger = Stopped(), asyncio.Event()
            if wake == "trigger":
                loop.call_later(0.05, trigger.set)
            elif wake == "stop":
                loop.call_later(0.05, stopped.event.set)
            start = loop.time()
            await handlers.pause(stopped, trigger, 0.5 if wake is None else 30)
            took.append(loop.time() - start)
        stopped, trigger = Stopped(), asyncio.Event()
        trigger.set()
        start = loop.time()
        await handlers.pause(stopped, None, 0.1)  # backing off: the trigger is not waited on
        took.append(loop.time() - start)
        return took

    trigger, stop, timeout, backoff = asyncio.run(scenario())
    assert trigger < 1 and stop < 1 and 0.4 < timeout < 2 and backoff >= 0.09


def test_a_spec_change_wakes_the_jobs_loop_and_a_status_patch_does_not():
    runtime = Runtime(Config.from_env({}), FakeKube({}, job=JOB))
    memo = type("Memo", (), {"runtime": runtime})()

    def event(generation: int, observed: int, **meta: Any) -> bool:
        runtime.trigger(("ns", "j")).clear()
        body = {"metadata": {"generation": generation, **meta},
                "status": {"observedGeneration": observed}}  # fmt: skip
        asyncio.run(handlers.job_event(body=body, type="MODIFIED", namespace="ns", name="j",  # type: ignore[arg-type]
                                       memo=memo))  # fmt: skip
        return runtime.trigger(("ns", "j")).is_set()

    assert event(2, 1) and not event(2, 2)
    assert not event(3, 2, deletionTimestamp="2026-01-01T00:00:00Z")


def test_the_pod_and_configmap_watches_are_filtered_by_the_api_server():
    import kopf

    settings = kopf.OperatorSettings()
    memo = type("Memo", (), {"runtime": Runtime(Config.from_env({}), FakeKube({}, job=JOB))})()
    handlers.configure(settings=settings, memo=memo)
    pods = kopf.Resource(group="", version="v1", plural="pods", namespaced=True)
    jobs = kopf.Resource(group=names.GROUP, version=names.VERSION, plural=names.PLURAL)
    assert settings.watching.label_selectors.collect(pods) == [
        f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY},{names.LABEL_JOB}"
    ]
    assert settings.watching.label_selectors.collect(jobs) == []
    configmaps = kopf.Resource(group="", version="v1", plural="configmaps", namespaced=True)
    assert settings.watching.label_selectors.collect(configmaps) == [
        f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY},{names.LABEL_COMPONENT}=progress"
    ]


def test_a_suspended_job_rests_once_its_pods_are_gone():
    """Idle jobs cost nothing per pass: a suspended job still stopping its pod is
    re-read soon (the pass deleted it), one with no pod left only as a safety net."""
    spec = JobSpec.from_dict(_running_job()["spec"])
    pod = trainer_pods.build_pod(JOB, spec, 0, 0)
    pod["spec"]["nodeName"] = "n1"
    pod["status"] = {"phase": "Running"}
    job = _running_job(phase="Running")
    job["spec"]["suspend"] = True
    stopping = FakeKube({("Pod", "j-worker-0"): pod}, job=job)
    assert Runtime(Config.from_env({}), stopping).reconcile_once("ns", "j", LOG) == 0.0
    job = _running_job(phase="Suspended", attemptStarted=False)
    job["spec"]["suspend"] = True
    idle = Runtime(Config.from_env({}), FakeKube({}, job=job)).reconcile_once("ns", "j", LOG)
    assert idle == runtime_mod.FINISHED_RECHECK_SECONDS
