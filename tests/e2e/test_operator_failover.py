"""The operator against the failures of the machinery around it: a leader frozen while a
standby takes over, and kube-apiserver itself going away mid-run and while the trainer
finishes. The trainer is the stand-in (tests/localcluster/standin_trainer.py: the
progress contract and final summary without TensorFlow): these are about the operator's
writes, not about training."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import tuneop_contract as contract

from tests.e2e.harness import (
    SESSION_PRIORITY,
    Env,
    Operator,
    progress_at,
    wait_for,
)
from tests.localcluster import disruption
from tests.localcluster import standin_trainer as standin

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

POD = "search-worker-0"
LIFETIME = "4"
"""Peering lifetime (s) of the test's replicas: a frozen leader is replaced this soon."""


def standin_spec(trials: int, seconds: float) -> dict[str, Any]:
    """Spec fields that run the stand-in trainer: `trials` trials of `seconds`, no GPU."""
    return {
        "env": standin.env(trials, seconds),
        "distribution": {"strategy": "Auto", "workers": 1, "gpusPerWorker": 0},
        "terminationGracePeriodSeconds": 5,
    }


def trained(e2e: Env, namespace: str, done: int) -> dict[str, Any]:
    """Until the stand-in reports `done` trials completed on its own endpoint (at its
    pod's IP, read once), or on its claim while another process answers there."""

    def pod_ip() -> str | None:
        pod = e2e.cluster.pod(namespace, POD)
        return None if pod is None or pod.status is None else pod.status.pod_ip

    ip = wait_for(pod_ip, 120, "the trainer pod IP")

    def check() -> dict[str, Any] | None:
        progress = progress_at(e2e.kubectl, namespace, "search", POD, ip)
        if progress and progress.get("phase") == contract.PHASE_COMPLETED:
            raise AssertionError(f"finished before it could be disrupted: {progress}")
        return progress if progress and progress["trials_completed"] >= done else None

    return wait_for(check, 120, f"{done} trial(s) done", every=0.1)


def check_final(e2e: Env, namespace: str, trials: int, **counts: int) -> dict[str, Any]:
    """Succeeded with every trial counted, the counters as given, and the best trial
    that results.json on the claim names."""
    final = e2e.wait_phase(namespace, "Succeeded", timeout=180)
    for key, value in counts.items():
        assert final[key] == value, (key, final)
    assert final["trials"] == f"{trials}/{trials}", final
    results = json.loads((e2e.claim_dir(namespace) / contract.RESULTS_FILE).read_text())
    assert len(results["trials"]) == trials
    assert final["bestTrial"]["id"] == results["best"]["trialId"] == standin.trial_id(trials - 1)
    assert final["bestTrial"]["score"] == pytest.approx(results["best"]["score"])
    return final


def pod_uids(e2e: Env, namespace: str) -> list[tuple[str, str]]:
    return [
        (p["metadata"]["uid"], p["metadata"]["labels"]["tuneop.io/attempt"])
        for p in e2e.kubectl.pods(namespace, "search")
    ]


def leader(operator: Operator) -> bool:
    return "tuneop_operator_leader 1.0" in operator.metrics()


def test_a_leader_frozen_mid_pass_and_resumed_after_failover_undoes_nothing(
    e2e: Env, tmp_path: Path
):
    """Two replicas (they outrank the session's operator, which pauses). The leader is
    SIGSTOPped the moment its trainer pod's end reaches the API server, so it is frozen
    in (or just before) the pass that reacts to it; the standby takes over once the
    leader's peering record expires and recreates the pod group; then the leader is
    resumed, with whatever it had read and decided before the freeze. It must delete
    no pod of the new group and count nothing twice."""
    kubeconfig = e2e.cluster.control_plane.kubeconfig
    lifetime = {"TUNEOP_OPERATOR_PEERING_LIFETIME_SECONDS": LIFETIME}
    first = Operator(
        kubeconfig, tmp_path / "leader.log", TUNEOP_OPERATOR_PRIORITY="300", **lifetime
    )
    second = Operator(
        kubeconfig, tmp_path / "standby.log", TUNEOP_OPERATOR_PRIORITY="200", **lifetime
    )
    assert SESSION_PRIORITY < 200
    first.start()
    second.start()
    frozen = False
    try:
        try:
            wait_for(
                lambda: leader(first) and not leader(second) and not leader(e2e.operator),
                60,
                "the first replica leading, the others paused",
            )
        except TimeoutError as err:
            logs = [o.log_tail(15) for o in (first, second, e2e.operator)]
            leaders = [leader(o) for o in (first, second, e2e.operator)]
            raise AssertionError(f"{err}: {leaders}\n" + "\n---\n".join(logs)) from None
        ns = e2e.namespace("failover")
        trials = 8
        e2e.submit(ns, **standin_spec(trials, 1.0))
        trained(e2e, ns, 2)
        ((old_uid, _),) = pod_uids(e2e, ns)
        disruption.evict_pod(e2e.cluster.api, ns, POD)

        def ended() -> bool:
            pod = e2e.cluster.pod(ns, POD)
            return pod is None or pod.status.phase in ("Failed", "Succeeded")

        wait_for(ended, 60, "the evicted pod's end in the API", every=0.01)
        assert first.process is not None
        os.kill(first.process.pid, signal.SIGSTOP)
        frozen = True
        at_freeze = e2e.status(ns)
        wait_for(lambda: leader(second), 60, "the standby taking over")

        def recreated() -> str | None:
            uids = pod_uids(e2e, ns)
            fresh = [u for u, attempt in uids if attempt == "1" and u != old_uid]
            pod = e2e.cluster.pod(ns, POD)
            running = pod is not None and pod.status.phase == "Running"
            return fresh[0] if fresh and running and len(uids) == 1 else None

        new_uid = wait_for(recreated, 60, "the standby's new pod group running")
        os.kill(first.process.pid, signal.SIGCONT)
        frozen = False
        wait_for(lambda: leader(first) and not leader(second), 60, "the first leading again")
        final = check_final(e2e, ns, trials, preemptions=1, failures=0, restarts=1, restores=1)
        assert pod_uids(e2e, ns) == [(new_uid, "1")], (at_freeze, final)
        for replica in (first, second):  # neither even tried to delete the new pod
            assert f"uid {new_uid}" not in replica.log_tail(5000)
        reasons = e2e.reasons(ns)
        assert reasons.count("Preempted") == 1 and reasons.count("Created") == 2, reasons
    finally:
        if frozen and first.process is not None:
            os.kill(first.process.pid, signal.SIGCONT)
        first.stop()
        second.stop()
    wait_for(lambda: leader(e2e.operator), 60, "the session's operator leading again")


def node_worker(e2e: Env, namespace: str, pod: str) -> Any:
    for agent in e2e.cluster.agents.values():
        worker = agent.worker(namespace, pod)
        if worker is not None:
            return worker
    raise AssertionError(f"no node runs {namespace}/{pod}")


def controllers_caught_up(e2e: Env, namespace: str) -> None:
    """After kube-apiserver came back: the controller-manager's informers re-list with
    their own backoff (seen: over a minute in the full suite), and the tests after this
    one need its ServiceAccount controller. A new namespace's default ServiceAccount
    says it works again."""
    e2e.cluster.create_namespace(f"{namespace}-after", timeout=240)


def test_apiserver_killed_and_restarted_mid_run(e2e: Env):
    """kube-apiserver SIGKILLed mid-search, back 5 s later: the same pod finishes the
    search; nothing counted, nothing created twice."""
    ns = e2e.namespace("apiserver-restart")
    trials = 6
    e2e.submit(ns, **standin_spec(trials, 1.0))
    trained(e2e, ns, 2)
    before = pod_uids(e2e, ns)
    e2e.cluster.control_plane.restart_apiserver(down_seconds=5)
    check_final(e2e, ns, trials, preemptions=0, failures=0, restarts=0)
    controllers_caught_up(e2e, ns)
    assert pod_uids(e2e, ns) == before
    assert e2e.reasons(ns) == ["Created", "Completed"]


def test_apiserver_down_while_the_trainer_finishes(e2e: Env):
    """kube-apiserver SIGKILLed before the trainer's last trials and started again only
    after it has exited: its last progress reports are lost, its final summary (the
    termination message) is not; the status agrees with results.json."""
    ns = e2e.namespace("apiserver-down")
    trials = 4
    e2e.submit(ns, **standin_spec(trials, 1.0))
    trained(e2e, ns, 1)
    before = pod_uids(e2e, ns)
    worker = node_worker(e2e, ns, POD)
    cp = e2e.cluster.control_plane
    cp.kill_apiserver()
    try:
        wait_for(lambda: worker.phase == "Succeeded", 60, "the trainer exiting", every=0.1)
        time.sleep(1)
    finally:
        cp.start_apiserver()
    check_final(e2e, ns, trials, preemptions=0, failures=0, restarts=0)
    controllers_caught_up(e2e, ns)
    assert pod_uids(e2e, ns) == before
    assert e2e.reasons(ns) == ["Created", "Completed"]


def test_two_operators_on_disjoint_namespaces_never_touch_each_others_jobs(
    e2e: Env, tmp_path: Path
):
    """Sharding by namespace (docs/design/operator.md, Beyond one operator): two
    operators, each watching only its own namespace (`TUNEOP_OPERATOR_NAMESPACES`, no
    peering between them), with the session's cluster-wide one stopped. Each runs its
    shard's job to the end; then one shard's operator stops, and a new job there is left
    as it was applied (no status, no finalizer, no pod) while the other shard's runs."""
    kubeconfig = e2e.cluster.control_plane.kubeconfig
    shards = [e2e.namespace("shard-a"), e2e.namespace("shard-b")]
    a, b = shards
    alone = {"TUNEOP_OPERATOR_PEERING": ""}
    operators = {
        ns: Operator(kubeconfig, tmp_path / f"{ns}.log", TUNEOP_OPERATOR_NAMESPACES=ns, **alone)
        for ns in shards
    }
    e2e.operator.stop()
    try:
        for operator in operators.values():
            operator.start()
        for ns in shards:
            e2e.submit(ns, **standin_spec(2, 0.5))
        for ns in shards:
            e2e.wait_phase(ns, "Succeeded", timeout=120)
        operators[a].stop()
        for ns in shards:
            e2e.submit(ns, name="second", **standin_spec(2, 0.5))
        e2e.wait_phase(b, "Succeeded", timeout=120, name="second")
        untouched = e2e.kubectl.job(a, "second")
        assert untouched is not None and not untouched.get("status"), untouched
        assert not untouched["metadata"].get("finalizers"), untouched["metadata"]
        assert e2e.kubectl.pods(a, "second") == []
        assert operators[b].log_count(f"{a}/") == 0, operators[b].log_tail()
    finally:
        for operator in operators.values():
            operator.stop()
        e2e.operator.start()
    e2e.wait_phase(a, "Succeeded", timeout=120, name="second")  # the session's takes it on
