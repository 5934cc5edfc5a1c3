"""The watch-fed cache (tuneop.run.watched) and the passes that read from it: a steady
pass reads nothing from the API server; what the pass wrote, a failed pass, and the
resync interval send it back to a live read; a watch event lost (the watch dropped)
never loses or double-counts a preemption."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from tuneop.api import names
from tuneop.render import trainer_pods
from tuneop.run.config import Config
from tuneop.run.runtime import FINISHED_RECHECK_SECONDS, Runtime
from tuneop.run.watched import RESYNC_SECONDS, Watched, trim_node
from tuneop_contract.spec import JobSpec

from tests.unit.fakes import JOB, Clock, FakeKube

LOG = logging.getLogger("test")
KEY = ("ns", "j")
PROGRESS = f"ConfigMap/{names.progress_configmap_name('j')}"
LIVE = ["job", "pods", PROGRESS]
"""A live read: the job, its pods, its progress ConfigMap."""

Obj = dict[str, Any]


def pod(name: str = "j-worker-0", rv: int = 10, uid: str = "p1", phase: str = "Running") -> Obj:
    return {"metadata": {"name": name, "uid": uid, "resourceVersion": str(rv)},
            "status": {"phase": phase}}  # fmt: skip


def running_world(clock: Clock) -> tuple[Runtime, FakeKube, Obj]:
    """A job whose one trainer pod runs on node n1, the node known to the node watch."""
    job = {**JOB, "spec": {**JOB["spec"], "distribution": {"workers": 1}},
           "status": {"attempt": 0, "attemptStarted": True, "phase": "Running"}}  # fmt: skip
    worker = trainer_pods.build_pod(JOB, JobSpec.from_dict(job["spec"]), 0, 0)
    worker["metadata"].update(uid="p1", resourceVersion="10")
    worker["spec"]["nodeName"] = "n1"
    worker["status"] = {"phase": "Running"}
    server = FakeKube({("Pod", "j-worker-0"): worker}, job=job, stores_status=True)
    runtime = Runtime(Config.from_env({}), server, Watched(clock=clock))
    runtime.watched.node_event({"metadata": {"name": "n1", "resourceVersion": "3"}}, False)
    return runtime, server, worker


def test_a_steady_running_job_reads_nothing_after_its_first_pass():
    clock = Clock()
    runtime, server, _ = running_world(clock)
    runtime.reconcile_once("ns", "j", LOG)
    assert server.reads == LIVE  # the first pass reads live; its node is watched
    for _ in range(5):
        clock.now += 2
        runtime.reconcile_once("ns", "j", LOG)
    assert server.reads == LIVE
    clock.now += RESYNC_SECONDS
    runtime.reconcile_once("ns", "j", LOG)
    # the resync, a level-based safety net: the job's objects, and its node, which no
    # watch event has named since
    assert server.reads == LIVE + LIVE + ["Node/n1"]


def fed_by_the_watches(runtime: Runtime, server: FakeKube, worker: Obj) -> None:
    """What kopf's first listing delivers of the running world: the job, its pod."""
    assert server.job is not None
    runtime.watched.job_event(KEY, server.job, False)
    runtime.pod_seen("ns", "j", worker)


def test_after_the_watches_first_listing_a_first_pass_reads_nothing():
    """kopf starts the job's daemon only once the indexed pods and progress maps are
    listed: the first pass after a start or a take-over trusts that listing."""
    clock = Clock()
    runtime, server, worker = running_world(clock)
    fed_by_the_watches(runtime, server, worker)
    assert runtime.watched.snapshot(KEY) is None  # the listing may still be on its way
    runtime.watched.listing_complete()
    runtime.reconcile_once("ns", "j", LOG)
    assert server.reads == []
    # a job first seen after the listing: the watches stream it whole
    runtime.watched.job_event(("ns", "later"), {**server.job, "metadata": {
        **server.job["metadata"], "name": "later"}}, False)  # fmt: skip
    assert runtime.watched.snapshot(("ns", "later")) is not None
    # the listing ages like a live read: the resync reads live
    clock.now += RESYNC_SECONDS
    runtime.reconcile_once("ns", "j", LOG)
    assert server.reads[:3] == LIVE


def test_after_a_pause_no_listing_is_trusted_again():
    """A replica that led, paused and leads again: kopf does not wait for its relist,
    which reports nothing deleted meanwhile. Every job's next pass reads live."""
    clock = Clock()
    runtime, server, worker = running_world(clock)
    fed_by_the_watches(runtime, server, worker)
    runtime.watched.listing_complete()
    runtime.reconcile_once("ns", "j", LOG)
    runtime.watched.paused()
    runtime.watched.listing_complete()  # its daemons start again
    runtime.reconcile_once("ns", "j", LOG)
    assert server.reads[:3] == LIVE
    runtime.watched.job_event(("ns", "later"), {**server.job, "metadata": {
        **server.job["metadata"], "name": "later"}}, False)  # fmt: skip
    assert runtime.watched.snapshot(("ns", "later")) is None


def test_a_job_the_watches_have_not_delivered_is_read_live():
    clock = Clock()
    runtime, _server, worker = running_world(clock)
    runtime.watched.listing_complete()
    runtime.pod_seen("ns", "j", worker)  # its pod came first
    assert runtime.watched.snapshot(KEY) is None


def test_a_status_patch_answer_keeps_the_cache_fresh_and_pod_writes_do_not():
    clock = Clock()
    runtime, server, worker = running_world(clock)
    runtime.reconcile_once("ns", "j", LOG)
    # the pod watch delivers the trainer's end: the pass counts it from the cache
    ended = {**worker, "metadata": {**worker["metadata"], "resourceVersion": "11"},
             "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {
                 "terminated": {"exitCode": 1, "reason": "Error"}}}]}}  # fmt: skip
    server.objects[("Pod", "j-worker-0")] = ended
    runtime.pod_seen("ns", "j", ended)
    reads = len(server.reads)
    runtime.reconcile_once("ns", "j", LOG)
    assert server.reads[reads:] == []
    assert server.patches[-1].get("failures") == 1
    # that pass deleted the pod (a write the watch has not delivered): the next reads live
    assert ("delete", "Pod/j-worker-0") in server.calls
    clock.now += 2
    runtime.reconcile_once("ns", "j", LOG)
    assert server.reads[reads:] == LIVE
    assert sum(p.get("failures") == 1 for p in server.patches) == 1


def test_a_lost_watch_event_is_corrected_at_the_resync_and_counted_once():
    """The pod is deleted while the pod watch is down: passes from the cache see it
    running; the resync's live read finds it gone and counts one preemption."""
    clock = Clock()
    runtime, server, _ = running_world(clock)
    runtime.reconcile_once("ns", "j", LOG)
    del server.objects[("Pod", "j-worker-0")]  # no watch event
    clock.now += 2
    runtime.reconcile_once("ns", "j", LOG)
    assert not any(p.get("preemptions") for p in server.patches)
    clock.now += RESYNC_SECONDS
    runtime.reconcile_once("ns", "j", LOG)
    assert [p["preemptions"] for p in server.patches if p.get("preemptions")] == [1]
    for _ in range(3):
        clock.now += 2
        runtime.reconcile_once("ns", "j", LOG)
    assert [p["preemptions"] for p in server.patches if p.get("preemptions")] == [1]
    assert server.job is not None and server.job["status"]["preemptions"] == 1


def suspended_world(clock: Clock) -> tuple[Runtime, FakeKube]:
    job = {**JOB, "spec": {**JOB["spec"], "suspend": True}}
    server = FakeKube({}, job=job, stores_status=True)
    return Runtime(Config.from_env({}), server, Watched(clock=clock)), server


def test_a_resting_job_reads_nothing_until_one_of_its_objects_changes():
    """A suspended job with no pod (as a finished one) passes every 600 s from the
    cache, past the resync; a new generation, or a pod or progress map event, ends the
    rest and its next pass reads live once."""
    clock = Clock()
    runtime, server = suspended_world(clock)
    assert runtime.reconcile_once("ns", "j", LOG) == FINISHED_RECHECK_SECONDS
    assert server.reads == LIVE
    for _ in range(3):
        clock.now += FINISHED_RECHECK_SECONDS
        runtime.reconcile_once("ns", "j", LOG)
    assert server.reads == LIVE
    assert server.job is not None
    runtime.watched.progress_event(KEY, {"metadata": {"name": "j-progress", "uid": "c1",
                                                      "resourceVersion": "20"}}, True)  # fmt: skip
    runtime.reconcile_once("ns", "j", LOG)
    assert server.reads == LIVE + LIVE
    clock.now += FINISHED_RECHECK_SECONDS
    runtime.reconcile_once("ns", "j", LOG)
    assert server.reads == LIVE + LIVE
    status_only = {**server.job, "metadata": {**server.job["metadata"], "resourceVersion": "30"}}
    runtime.watched.job_event(KEY, status_only, False)  # its own status patch, say
    runtime.reconcile_once("ns", "j", LOG)
    assert server.reads == LIVE + LIVE
    meta = {**server.job["metadata"], "resourceVersion": "31", "generation": 2}
    resumed = {**server.job, "metadata": meta, "spec": {**JOB["spec"], "suspend": False}}
    server.job = resumed
    runtime.watched.job_event(KEY, resumed, False)
    runtime.reconcile_once("ns", "j", LOG)
    assert server.reads[: 3 * len(LIVE)] == LIVE * 3


def test_an_event_during_a_pass_or_a_new_job_of_the_name_ends_the_rest():
    clock = Clock()
    runtime, server = suspended_world(clock)
    runtime.reconcile_once("ns", "j", LOG)
    view = runtime.watched.snapshot(KEY)
    assert view is not None
    # a pod event while a pass decided on `view`: that pass may not rest the job
    runtime.pod_seen("ns", "j", pod())
    runtime.watched.settle(KEY, True, view.events)
    clock.now += RESYNC_SECONDS
    assert runtime.watched.snapshot(KEY) is None
    # the same name, a new uid (its deletion lost in a relist), the same generation
    runtime, server = suspended_world(clock)
    runtime.reconcile_once("ns", "j", LOG)
    assert server.job is not None
    again = {**server.job, "metadata": {**server.job["metadata"], "uid": "u2",
                                        "resourceVersion": "40"}}  # fmt: skip
    runtime.watched.job_event(KEY, again, False)
    clock.now += RESYNC_SECONDS
    assert runtime.watched.snapshot(KEY) is None


def test_a_failed_pass_sends_the_next_to_a_live_read():
    clock = Clock()
    runtime, server, _ = running_world(clock)
    runtime.reconcile_once("ns", "j", LOG)

    def refuse(*_: Any, **__: Any) -> None:
        raise RuntimeError("API server down")

    server.patch_status = refuse  # type: ignore[method-assign]
    server.objects[("ConfigMap", "j-progress")] = {
        "metadata": {"name": "j-progress", "resourceVersion": "20"},
        "data": {"progress.json": '{"trialsCompleted": 2}'},
    }
    runtime.watched.progress_event(KEY, server.objects[("ConfigMap", "j-progress")], False)
    reads = len(server.reads)
    with pytest.raises(RuntimeError):
        runtime.reconcile_once("ns", "j", LOG)
    assert server.reads[reads:] == []
    with pytest.raises(RuntimeError):
        runtime.reconcile_once("ns", "j", LOG)
    assert server.reads[reads:] == LIVE


def test_the_scripts_configmap_is_read_only_when_a_pod_group_is_to_start():
    clock = Clock()
    runtime, server, _ = running_world(clock)
    assert server.job is not None
    server.job["spec"] = {"image": "img", "script": {"configMap": {"name": "my-search"}},
                          "distribution": {"workers": 1}}  # fmt: skip
    runtime.reconcile_once("ns", "j", LOG)
    assert "ConfigMap/my-search" not in server.reads  # running: nothing to start
    del server.objects[("Pod", "j-worker-0")]
    clock.now += RESYNC_SECONDS
    runtime.reconcile_once("ns", "j", LOG)  # counts the loss, moves to a new pod group
    clock.now += 2
    runtime.reconcile_once("ns", "j", LOG)  # starts it: the script is needed now
    assert "ConfigMap/my-search" in server.reads


def test_an_older_copy_never_replaces_a_newer_one():
    watched = Watched(clock=Clock())
    watched.read_live(KEY, JOB, [pod(rv=12)], {"resourceVersion": "12"}, None)
    watched.pod_event(KEY, pod(rv=11, phase="Pending"), False)  # a late watch event
    snap = watched.snapshot(KEY)
    assert snap is not None and [p["status"]["phase"] for p in snap.pods] == ["Running"]
    watched.job_event(KEY, {**JOB, "metadata": {**JOB["metadata"], "resourceVersion": "6"}}, False)
    snap = watched.snapshot(KEY)
    assert snap is not None and snap.job == JOB  # resourceVersion 7 kept


def test_at_the_same_version_the_watchs_copy_is_kept_not_a_second_one():
    """The watch's copy shares its objects with kopf's; a status patch's answer or a
    live read of the same version would be a second copy of every job in memory."""
    watched = Watched(clock=Clock())
    delivered = {**JOB, "metadata": {**JOB["metadata"], "resourceVersion": "8"}}
    watched.job_event(KEY, delivered, False)
    watched.read_live(KEY, dict(delivered), [], {"resourceVersion": "8"}, None)
    watched.applied(KEY, dict(delivered), wrote_children=False)
    snap = watched.snapshot(KEY)
    assert snap is not None and snap.job is delivered
    answer = {**JOB, "metadata": {**JOB["metadata"], "resourceVersion": "9"}}
    watched.applied(KEY, answer, wrote_children=False)  # newer: it replaces
    snap = watched.snapshot(KEY)
    assert snap is not None and snap.job is answer


def test_a_deleted_pod_is_not_brought_back_by_a_list_served_before_its_deletion():
    watched = Watched(clock=Clock())
    watched.pod_event(KEY, pod(rv=15), True)
    snap = watched.read_live(KEY, JOB, [pod(rv=14)], {"resourceVersion": "14"}, None)
    assert snap.pods == []
    # a successor under the same name (another uid) is a new pod
    snap = watched.read_live(KEY, JOB, [pod(rv=16, uid="p2")], {"resourceVersion": "16"}, None)
    assert [p["metadata"]["uid"] for p in snap.pods] == ["p2"]


def test_a_pod_the_watch_delivered_after_the_list_was_served_is_kept():
    watched = Watched(clock=Clock())
    watched.pod_event(KEY, pod("j-worker-1", rv=30, uid="p3"), False)
    watched.pod_event(KEY, pod("j-worker-2", rv=5, uid="p4"), False)  # gone by the list
    snap = watched.read_live(KEY, JOB, [pod(rv=20)], {"resourceVersion": "25"}, None)
    assert sorted(p["metadata"]["name"] for p in snap.pods) == ["j-worker-0", "j-worker-1"]


def test_nodes_are_trimmed_to_what_classification_reads():
    node = {"metadata": {"name": "n1", "uid": "u", "resourceVersion": "9", "labels": {"a": "b"}},
            "status": {"images": [{"names": ["x"] * 50}], "conditions": [
                {"type": "Ready", "status": "False"}, {"type": "MemoryPressure"}]}}  # fmt: skip
    assert trim_node(node) == {
        "metadata": {"name": "n1", "uid": "u", "resourceVersion": "9"},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    watched = Watched()
    assert watched.node("n1") == (False, None)
    watched.node_event(node, False)
    assert watched.node("n1") == (True, trim_node(node))
    watched.node_event(node, True)
    assert watched.node("n1") == (True, None)  # known gone: the pod was lost with it


def test_a_deleted_job_leaves_nothing_behind():
    watched = Watched(clock=Clock())
    watched.read_live(KEY, JOB, [pod()], {"resourceVersion": "10"}, None)
    watched.job_event(KEY, JOB, True)
    assert watched.snapshot(KEY) is None  # its next pass reads live (and finds it gone)
    # what the garbage collector deletes after it creates no entry again
    watched.pod_event(KEY, pod(rv=20), True)
    watched.progress_event(KEY, {"metadata": {"name": "j-progress"}}, True)
    assert watched._jobs == {}


def test_a_deleted_jobs_stragglers_create_nothing_until_a_job_of_that_name_appears():
    watched = Watched(clock=Clock())
    watched.read_live(KEY, JOB, [pod()], {"resourceVersion": "10"}, None)
    watched.job_event(KEY, JOB, True)
    watched.pod_event(KEY, pod(rv=21, phase="Succeeded"), False)  # still terminating
    watched.progress_event(KEY, {"metadata": {"name": "j-progress", "uid": "c1"}}, False)
    assert watched._jobs == {} and watched.gone(KEY)
    watched.applied(KEY, JOB, True)  # a pass that was still running
    assert watched._jobs == {}
    watched.job_event(KEY, {**JOB, "metadata": {**JOB["metadata"], "uid": "u2"}}, False)
    assert not watched.gone(KEY)
    watched.pod_event(KEY, pod("j-worker-0", rv=30, uid="p9"), False)
    assert [p["metadata"]["uid"] for p in watched._jobs[KEY].pods.values()] == ["p9"]


def test_only_that_very_progress_map_is_cleared_by_its_deletion():
    watched = Watched(clock=Clock())
    old = {"metadata": {"name": "j-progress", "uid": "c1", "resourceVersion": "5"}}
    new = {"metadata": {"name": "j-progress", "uid": "c2", "resourceVersion": "6"}}
    watched.read_live(KEY, JOB, [], {"resourceVersion": "4"}, old)
    watched.progress_event(KEY, new, False)  # the replacement, delivered first
    watched.progress_event(KEY, old, True)
    snap = watched.snapshot(KEY)
    assert snap is not None and snap.progress == new


def test_a_node_is_read_again_after_the_resync_interval():
    clock = Clock()
    watched = Watched(clock=clock)
    watched.node_event({"metadata": {"name": "n1", "resourceVersion": "3"}}, False)
    assert watched.node("n1")[0]
    clock.now += RESYNC_SECONDS
    assert watched.node("n1") == (False, None)
    watched.node_read("n1", None)  # deleted while the watch was down
    assert watched.node("n1") == (True, None)


def test_a_parallel_jobs_existing_claim_is_read_once_per_resync():
    clock = Clock()
    claim = {"metadata": {"name": "shared", "uid": "c"}, "spec": {"accessModes": ["ReadWriteMany"]}}
    server = FakeKube({("PersistentVolumeClaim", "shared"): claim})
    gets: list[str] = []
    read = server.get
    server.get = lambda path: gets.append(path) or read(path)  # type: ignore[method-assign]
    runtime = Runtime(Config.from_env({}), server, Watched(clock=clock))
    spec = JobSpec.from_dict({**JOB["spec"], "parallelTrials": 2,
                              "checkpoint": {"existingClaim": "shared"}})  # fmt: skip
    for _ in range(3):
        assert runtime._claim(KEY, spec) == claim
        clock.now += 2
    assert len(gets) == 1
    clock.now += RESYNC_SECONDS
    assert runtime._claim(KEY, spec) == claim and len(gets) == 2
