"""How the chaos soak's faults see their victims when the cluster misbehaves under them:
a pod the scheduler bound to a node after it crashed, and a claim-full fault's watch cut
by an API server restart that will not resume from the version it had seen."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client

from bench.chaos import claims, faults

Obj = dict[str, Any]


class Clock:
    """time.monotonic and time.sleep for a module under test: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def pod(
    uid: str, phase: str = "Running", deleting: bool = False, exit_code: int | None = None
) -> Obj:
    state = {"terminated": {"exitCode": exit_code}} if exit_code is not None else {"running": {}}
    meta: Obj = {"uid": uid, "namespace": "ns", "name": f"search-{uid}", "resourceVersion": "1",
                 "labels": {"tuneop.io/attempt": uid[-1]},
                 "ownerReferences": [{"kind": "TuningJob", "uid": "job"}]}  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "containerStatuses": [{"state": state}]}}


def test_a_pod_bound_to_a_crashed_node_before_it_was_found_down_is_a_possible_victim(
    monkeypatch: pytest.MonkeyPatch,
):
    """The scheduler placed a new pod group on the dead node; the taint manager then
    deleted it with the node's own pods. The operator may count it: the fault says so."""
    clock = Clock()
    listings = iter([
        [pod("old-0")],
        [pod("old-0"), pod("new-1", phase="Pending")],
        [pod("old-0", deleting=True), pod("new-1", phase="Pending", deleting=True)],
    ])  # fmt: skip

    def on_node(_ctx: Any, namespace: str | None = None, node: str | None = None) -> list[Obj]:
        assert node == "node-2"
        return next(listings, [])

    monkeypatch.setattr(faults, "time", types.SimpleNamespace(monotonic=clock.monotonic,
                                                              sleep=clock.sleep))  # fmt: skip
    monkeypatch.setattr(faults, "trainer_pods", on_node)
    ctx = cast(faults.Context, None)
    late = faults._while_down(ctx, "node-2", {"old-0"}, hold=10.0)
    assert list(late) == ["new-1"]
    assert clock.now >= 10.0  # the hold is kept after the pods were marked
    hit = faults.hit(late["new-1"])
    assert not hit.clean and hit.attempt == "1"


def test_a_crashed_node_whose_pods_are_never_marked_comes_back_after_the_bound(
    monkeypatch: pytest.MonkeyPatch,
):
    clock = Clock()
    monkeypatch.setattr(faults, "time", types.SimpleNamespace(monotonic=clock.monotonic,
                                                              sleep=clock.sleep))  # fmt: skip
    monkeypatch.setattr(faults, "trainer_pods", lambda *_a, **_k: [pod("old-0")])
    assert faults._while_down(cast(faults.Context, None), "n", {"old-0"}, hold=5.0) == {}
    assert faults.CRASH_MARK_SECONDS < clock.now <= faults.CRASH_MARK_SECONDS + 2


class Listing:
    def __init__(self, items: list[Obj], version: str) -> None:
        self.items, self.metadata = items, types.SimpleNamespace(resource_version=version)


class OutageCore:
    """A CoreV1Api whose watch breaks: events, then a cut, then a 410 on resuming."""

    def __init__(self, listings: list[list[Obj]]) -> None:
        self.listings = iter(listings)
        self.api_client = types.SimpleNamespace(sanitize_for_serialization=lambda o: o)

    def list_namespaced_pod(self, namespace: str, label_selector: str = "") -> Listing:
        return Listing(next(self.listings), "10")


class Model:
    """A watch event's object: the model's resourceVersion, the dict it serializes to."""

    def __init__(self, obj: Obj) -> None:
        self.obj, self.metadata = obj, types.SimpleNamespace(resource_version="11")


def test_a_claim_fault_whose_watch_cannot_resume_lists_again_and_keeps_the_unseen_ends(
    monkeypatch: pytest.MonkeyPatch,
):
    """Worker 0 exits 75 where the watch sees it; worker 1's end falls in an API server
    restart after which the watch is refused (410): gone from the new listing, its end
    unknown, it is an uncounted possible hit; a pod the new listing shows is not."""
    clock = Clock()
    monkeypatch.setattr(claims, "time", types.SimpleNamespace(monotonic=clock.monotonic,
                                                              sleep=clock.sleep))  # fmt: skip
    core = OutageCore([[pod("w-0"), pod("w-1")], [pod("g-2", phase="Pending")]])
    core.api_client.sanitize_for_serialization = lambda o: o.obj if isinstance(o, Model) else o
    streams = iter(["events", "cut", "gone", "quiet"])

    class Watch:
        def stream(self, *_a: Any, **kw: Any) -> Iterator[Obj]:
            what = next(streams, "quiet")
            if what == "events":
                assert kw["resource_version"] == "10"
                yield {"type": "MODIFIED", "object": Model(pod("w-0", exit_code=75))}
                return
            elif what == "cut":
                raise ConnectionError("connection refused")
            elif what == "gone":
                assert kw["resource_version"] == "11"
                raise client.ApiException(status=410)
            clock.sleep(kw["timeout_seconds"])

    monkeypatch.setattr(claims.watch, "Watch", Watch)
    exits = claims.ExitWatch(cast(client.CoreV1Api, core), "ns")
    exits.follow(30.0)
    assert list(exits.preempted) == ["w-0"]
    assert list(exits.unseen) == ["w-1"]
    assert exits.version == "10" and list(exits.alive) == ["g-2"]


def test_a_scheduler_preemption_cut_by_an_outage_keeps_the_nodes_pods_as_possible_hits(
    monkeypatch: pytest.MonkeyPatch,
):
    """The preemptor's creation failed on a dropped connection: it may have been made,
    and the scheduler may have preempted any trainer on the node."""

    def no_node(_name: str) -> None:
        raise ConnectionError("connection refused")

    cluster = types.SimpleNamespace(api=None, core=types.SimpleNamespace(read_node=no_node))
    slots = [faults.SlotJob(0, "standin", "ns", "job")]
    ctx = cast(Any, types.SimpleNamespace(env=types.SimpleNamespace(cluster=cluster), slots=slots))
    monkeypatch.setattr(faults, "_node_of", lambda *_a: "node-1")
    monkeypatch.setattr(faults, "trainer_pods", lambda *_a, **_k: [pod("w-0")])
    deleted: list[tuple[str, ...]] = []
    monkeypatch.setattr(faults.q, "retried", lambda _env, _s, *args: deleted.append(args))
    record = faults.FaultRecord("scheduler-preempt", 0, 10.0)
    with pytest.raises(ConnectionError):
        faults.scheduler_preempt(ctx, record, faults.s.Planned(10.0, "scheduler-preempt", 0, 5))
    assert [(h.attempt, h.clean) for h in record.hits] == [("0", False)]
    assert deleted and deleted[0][:3] == ("delete", "pod", faults.PREEMPTOR_NAME)
