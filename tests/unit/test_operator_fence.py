"""The fence: a pass that read before the process was frozen writes nothing."""

from __future__ import annotations

import asyncio
import threading

import pytest
from tuneop.act import kube
from tuneop.act.fence import FREEZE_SECONDS, TICK_SECONDS, Fence, Frozen

from tests.unit.fakes import JOB, LOG, Clock, FakeApiClient, FakeKube, kube_on


def test_a_pass_that_read_before_a_freeze_writes_nothing():
    clock = Clock()
    fence = Fence(clock=clock)
    fence.check()  # no pass began on this thread: not checked
    fence.begin()
    clock.now += TICK_SECONDS
    fence.tick()
    fence.check()  # ticking normally
    clock.now += FREEZE_SECONDS + 1  # frozen: neither the loop nor the thread ran
    with pytest.raises(Frozen):  # the thread runs first after the freeze
        fence.check()
    fence.tick()  # the loop ran first: it saw the gap
    with pytest.raises(Frozen):
        fence.check()
    fence.begin()  # the next pass reads afresh
    clock.now += TICK_SECONDS
    fence.tick()
    fence.check()


def test_a_slow_call_on_a_running_loop_is_not_a_freeze():
    clock = Clock()
    fence = Fence(clock=clock)
    fence.begin()
    for _ in range(100):  # a 50 s call while the loop keeps ticking
        clock.now += TICK_SECONDS
        fence.tick()
    fence.check()


def test_the_fence_is_per_thread():
    clock = Clock()
    fence = Fence(clock=clock)
    fence.begin()
    clock.now += FREEZE_SECONDS + 1
    fence.tick()
    errors: list[BaseException] = []

    def other() -> None:  # began no pass (kopf's cleanup handler): not checked
        try:
            fence.check()
        except BaseException as err:  # pragma: no cover - the failure being tested
            errors.append(err)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert errors == []
    with pytest.raises(Frozen):
        fence.check()


def test_kube_asks_the_fence_before_writes_only():
    api = FakeApiClient()
    client = kube_on(api)
    clock = Clock()
    client.fence = Fence(clock=clock)
    client.fence.begin()
    clock.now += FREEZE_SECONDS + 1
    client.get("/api/v1/nodes/n1")  # reads go through
    with pytest.raises(Frozen):
        client.delete("Pod", "ns", "p", uid="u1")
    with pytest.raises(Frozen):
        client.patch_status("ns", "j", {"attempt": 1}, resource_version="7")
    assert [method for method, *_ in api.sent] == ["GET"]


def test_the_ticker_runs_on_the_loop():
    fence = Fence()

    async def scenario() -> None:
        task = asyncio.create_task(fence.run())
        fence.begin()
        await asyncio.sleep(TICK_SECONDS * 2.5)
        fence.check()
        task.cancel()

    asyncio.run(scenario())
    assert kube.Kube.fence is None  # a Kube without one (tests, tools) checks nothing


def test_after_its_status_patch_a_pass_carries_out_the_rest():
    """The status patch (resourceVersion-fenced) is the commit point: a freeze after it
    does not drop the decision's deletes and Events."""
    clock = Clock()
    fence = Fence(clock=clock)
    fence.begin()
    fence.committed()
    clock.now += FREEZE_SECONDS + 1
    fence.tick()
    fence.check()


def test_a_pass_ends_with_its_thread_unchecked():
    """reconcile_once ends its pass: a kopf handler run later on the same thread (the
    cleanup) is not judged by that pass's start."""
    from tuneop.run.config import Config
    from tuneop.run.runtime import Runtime

    clock = Clock()
    client = FakeKube({}, job=JOB)
    client.fence = Fence(clock=clock)
    Runtime(Config.from_env({}), client).reconcile_once("ns", "j", LOG)
    clock.now += FREEZE_SECONDS + 1
    client.fence.tick()
    client.fence.check()
