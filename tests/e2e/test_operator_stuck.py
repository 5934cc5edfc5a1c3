"""Stuck jobs are visible on the real control plane: the scheduler's Unschedulable, a
container that cannot be configured, a ResourceQuota refusing the pods. No trainer
trains here: each case ends before one would matter."""

from __future__ import annotations

import pytest
from tuneop.decide.patch import UNWATCHED_RECHECK_SECONDS

from tests.e2e.harness import Env, condition, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]


def test_an_unschedulable_job_says_why_then_stalls_and_fails_by_policy(e2e: Env):
    ns = e2e.namespace("unsched")
    # the local node has 4 GPUs
    e2e.submit(ns, distribution={"gpusPerWorker": 8}, pendingTimeoutSeconds=10, stallPolicy="Fail")
    status = e2e.wait_status(
        ns,
        # (first the claim may not be bound yet: the scheduler says so too)
        lambda s: (
            condition(s, "Running").get("reason") == "Unschedulable"
            and "nvidia.com/gpu" in condition(s, "Running").get("message", "")
        ),
        60,
        "condition Running reason Unschedulable naming the GPUs",
    )
    assert status["phase"] == "Pending"
    final = e2e.wait_phase(ns, "Failed", timeout=90)
    assert condition(final, "Failed")["reason"] == "Stalled"
    assert (
        "Unschedulable for" in final["message"] and "pendingTimeoutSeconds=10" in final["message"]
    )
    assert "Stalled" in e2e.reasons(ns)
    assert final["failures"] == 0 and final["preemptions"] == 0


def test_a_container_that_cannot_be_configured_is_named(e2e: Env):
    ns = e2e.namespace("config")
    env = [{"name": "DATA", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}]
    e2e.submit(ns, env=env, pendingTimeoutSeconds=10)
    status = e2e.wait_status(
        ns,
        lambda s: condition(s, "Stalled").get("reason") == "CreateContainerConfigError",
        90,
        "Stalled reason CreateContainerConfigError",
    )
    assert condition(status, "Running")["reason"] == "CreateContainerConfigError"
    assert "absent" in condition(status, "Stalled")["message"], status
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--wait=false")


def test_pods_refused_by_a_quota_are_reported_and_start_once_it_allows(e2e: Env):
    ns = e2e.namespace("quota")
    e2e.quota(ns, "no-gpus", {"requests.nvidia.com/gpu": "0"})
    e2e.submit(ns)
    status = e2e.wait_status(
        ns,
        lambda s: condition(s, "Running").get("reason") == "PodRejected",
        60,
        "condition Running reason PodRejected",
    )
    assert "exceeded quota" in condition(status, "Running")["message"], status
    assert not e2e.kubectl.pods(ns, "search")
    # A freed quota sends no event: the job tries again every UNWATCHED_RECHECK_SECONDS
    # and is refused again; it says so once, not once per pass: one Warning Event.
    refused = (f"{ns}/search: ", "PodRejected: pod search-worker-0 was refused")
    passes = e2e.operator.log_count(*refused)
    wait_for(
        lambda: e2e.operator.log_count(*refused) >= passes + 1,
        UNWATCHED_RECHECK_SECONDS + 10,
        "the job's next attempt at its deadline",
    )
    events = e2e.kubectl.events(ns, "search")
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "PodRejected")], events
    assert (events[0].get("count") or 1) == 1 and not events[0].get("series"), events[0]
    assert "exceeded quota" in events[0]["message"]
    e2e.kubectl("delete", "resourcequota", "no-gpus", "-n", ns)
    e2e.wait_status(ns, lambda s: s.get("attemptStarted") is True, 60, "the pod group created")
    assert [p["metadata"]["name"] for p in e2e.kubectl.pods(ns, "search")] == ["search-worker-0"]
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--wait=false")


def test_a_queue_label_without_kueue_installed_is_inert(e2e: Env):
    """Documented behaviour: without Kueue (no webhook gates the pods) a job labelled
    kueue.x-k8s.io/queue-name runs as any other. (Runs before test_queue.py starts Kueue.)"""
    hooks = e2e.kubectl("get", "mutatingwebhookconfigurations", "-o", "name").stdout
    assert "kueue" not in hooks, "Kueue is running in this session: order the tests"
    ns = e2e.namespace("nokueue")
    e2e.submit(ns, labels={"kueue.x-k8s.io/queue-name": "lq"})
    e2e.wait_phase(ns, "Running", timeout=120)
    (pod,) = e2e.kubectl.pods(ns, "search")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "lq"
    assert not pod["spec"].get("schedulingGates")
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--wait=false")
