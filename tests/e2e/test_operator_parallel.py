"""Parallel trials end to end: `spec.parallelTrials: 2` on the local cluster, the real
operator, an oracle pod and two trial groups of real trainer processes using keras-tuner's
own distributed tuning over the job's headless Service.

What is checked from outside: which pods exist and keep their uid, the status and
Events, and the search on the claim (results.json and keras-tuner's trial files): six
distinct trials, each recorded once, none lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tuneop_contract as contract

from tests.e2e.harness import Env, wait_mid_epoch
from tests.localcluster import disruption

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

TRIALS = 6
# the sample's synthetic data: 512 samples, validation 0.25, batch 32 -> 12 steps an epoch
STEPS_PER_EPOCH = 12
INTERVAL_STEPS = 3
SMALL_BATCH = 8  # 48 steps an epoch: room between the eviction and its SIGTERM
ORACLE = "search-oracle"
T0, T1 = "search-t0-worker-0", "search-t1-worker-0"
GROUP_TUNER_IDS = {T0: contract.trial_group_tuner_id(0), T1: contract.trial_group_tuner_id(1)}


def parallel_search(trials: int = TRIALS, epochs: int = 2, batch_size: int = 32) -> dict[str, Any]:
    """Spec fields of a search in two trial groups over the sample's data."""
    return {
        "parallelTrials": 2,
        "tuner": {
            "algorithm": "RandomSearch",
            "objective": {"name": "val_accuracy", "direction": "max"},
            "maxTrials": trials,
            "maxEpochs": epochs,
            "seed": 7,
            "batchSize": batch_size,
        },
        "checkpoint": {"size": "1Gi", "intervalSteps": INTERVAL_STEPS, "intervalSeconds": 30},
        "resources": {},
        "terminationGracePeriodSeconds": 30,
    }


def search_on_claim(root: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """keras-tuner's trial records (one per trial) and the oracle's state."""
    (project,) = [p for p in (root / contract.TUNER_DIR).iterdir() if (p / "oracle.json").exists()]
    trials = [json.loads(f.read_text()) for f in sorted(project.glob("trial_*/trial.json"))]
    return trials, json.loads((project / "oracle.json").read_text())


def check_search(e2e: Env, namespace: str, expected: int = TRIALS) -> dict[str, Any]:
    """`expected` distinct trials, each COMPLETED, each ended once; results.json agrees."""
    root = e2e.claim_dir(namespace)
    trials, oracle = search_on_claim(root)
    ids = [t["trial_id"] for t in trials]
    assert len(ids) == expected == len(set(ids)), ids
    statuses = {t["trial_id"]: t["status"] for t in trials}
    assert set(statuses.values()) == {"COMPLETED"}, statuses
    assert sorted(oracle["end_order"]) == sorted(ids), oracle["end_order"]  # each once
    assert oracle["ongoing_trials"] == {} and oracle["retry_queue"] == []
    values = [json.dumps(t["hyperparameters"]["values"], sort_keys=True) for t in trials]
    assert len(set(values)) == expected  # never the same hyperparameters twice
    results = json.loads((root / contract.RESULTS_FILE).read_text())
    assert sorted(str(t["trialId"]) for t in results["trials"]) == sorted(ids)
    assert (root / contract.BEST_MODEL_FILE).exists()
    # The job's status has the best trials of results.json, best first.
    top = e2e.status(namespace)["topTrials"]
    ranked = contract.rank_trials(results["trials"], results["objective"]["direction"])
    assert [(t["id"], t["score"]) for t in top] == [(t["trialId"], t["score"]) for t in ranked]
    assert top[0]["id"] == results["best"]["trialId"]
    return results


def wait_group_mid_epoch(
    e2e: Env, namespace: str, pod: str, timeout: float = 300, steps: int = STEPS_PER_EPOCH
) -> dict[str, Any]:
    """Until `pod`'s trainer is past its first periodic checkpoint inside an epoch of
    `steps` steps, with at least half of it left (the eviction's SIGTERM lands a few
    steps later, still inside the epoch)."""
    try:
        return wait_mid_epoch(
            e2e.kubectl, namespace, "search", steps, timeout, INTERVAL_STEPS + 1,
            pod=pod, tuner_id=GROUP_TUNER_IDS[pod], any_trial=True,
        )  # fmt: skip
    except (TimeoutError, AssertionError) as err:
        raise AssertionError(f"{err}\n{e2e.diagnose(namespace)}") from None


def uid(e2e: Env, namespace: str, pod: str) -> str:
    return str(e2e.kubectl.json("get", "pod", pod, "-n", namespace)["metadata"]["uid"])


def test_two_trial_groups_one_evicted_mid_trial_resumes_alone(e2e: Env):
    ns = e2e.namespace("parallel")
    e2e.submit(ns, search=parallel_search(batch_size=SMALL_BATCH))
    e2e.wait_phase(ns, "Running", timeout=120)
    pods = {p["metadata"]["name"] for p in e2e.kubectl.pods(ns, "search")}
    assert pods == {ORACLE, T0, T1}, pods
    oracle_pod = e2e.kubectl.json("get", "pod", ORACLE, "-n", ns)
    assert "nvidia.com/gpu" not in json.dumps(oracle_pod["spec"]["containers"][0]["resources"])
    before = {ORACLE: uid(e2e, ns, ORACLE), T0: uid(e2e, ns, T0)}
    at = wait_group_mid_epoch(e2e, ns, T1, steps=STEPS_PER_EPOCH * 32 // SMALL_BATCH)
    disruption.evict_pod(e2e.cluster.api, ns, T1)
    status = e2e.wait_status(ns, lambda s: s.get("preemptions", 0) >= 1, 120, "the preemption")
    groups = {g["name"]: g for g in status["groups"]}
    assert groups["t1"]["preemptions"] == 1 and groups["t1"]["attempt"] == 1
    restored = e2e.wait_status(ns, lambda s: s.get("restores", 0) >= 1, 240, "the restore")
    groups = {g["name"]: g for g in restored["groups"]}
    assert groups["t1"]["restores"] == 1 and groups["t0"]["attempt"] == 0
    events = e2e.kubectl.events(ns, "search")
    restore = [e["message"] for e in events if e["reason"] == "Restored"]
    assert restore and "trial group t1" in restore[0] and f"trial {at['trial_id']}" in restore[0]
    assert "at step" in restore[0], restore  # mid-epoch: resumed at its step, not from scratch
    final = e2e.wait_phase(ns, "Succeeded", timeout=600)
    assert {ORACLE: uid(e2e, ns, ORACLE), T0: uid(e2e, ns, T0)} == before  # untouched
    assert final["preemptions"] == 1 and final["failures"] == 0
    assert final["trials"] == f"{TRIALS}/{TRIALS}"
    results = check_search(e2e, ns)
    assert final["bestTrial"]["id"] == str(results["best"]["trialId"])


def test_the_oracle_deleted_mid_search_is_recreated_and_nothing_is_lost(e2e: Env):
    ns = e2e.namespace("oracle")
    e2e.submit(ns, search=parallel_search())
    e2e.wait_phase(ns, "Running", timeout=120)
    wait_group_mid_epoch(e2e, ns, T0)
    trial_uids = {T0: uid(e2e, ns, T0), T1: uid(e2e, ns, T1)}
    disruption.delete_pod(e2e.cluster.api, ns, ORACLE, grace_seconds=0)
    status = e2e.wait_status(ns, lambda s: s.get("preemptions", 0) >= 1, 120, "the oracle's loss")
    assert {g["name"]: g for g in status["groups"]}["oracle"]["attempt"] == 1
    final = e2e.wait_phase(ns, "Succeeded", timeout=600)
    assert final["failures"] == 0 and final["preemptions"] == 1
    assert {T0: uid(e2e, ns, T0), T1: uid(e2e, ns, T1)} == trial_uids  # they waited, not failed
    check_search(e2e, ns)


def test_the_oracle_preempted_by_the_scheduler_is_recreated(e2e: Env):
    """The oracle holds CPU but no GPU: a higher-priority pod that needs the node's whole
    CPU makes the real scheduler preempt it (the trial groups request none here)."""
    ns = e2e.namespace("oprio")
    e2e.submit(ns, search=parallel_search())
    e2e.wait_phase(ns, "Running", timeout=120)
    wait_group_mid_epoch(e2e, ns, T0)
    trial_uids = {T0: uid(e2e, ns, T0), T1: uid(e2e, ns, T1)}
    node = e2e.kubectl.json("get", "node", "gpu-node-0")
    cpu = node["status"]["allocatable"]["cpu"]
    preemptor = disruption.preempt_with_priority(e2e.cluster.api, ns, gpus=0, cpu=cpu)
    status = e2e.wait_status(ns, lambda s: s.get("preemptions", 0) >= 1, 120, "the preemption")
    events = [e["message"] for e in e2e.kubectl.events(ns, "search") if e["reason"] == "Preempted"]
    assert events and "oracle" in events[0] and "PreemptionByScheduler" in events[0], events
    assert {g["name"]: g for g in status["groups"]}["oracle"]["preemptions"] == 1
    e2e.kubectl("delete", "pod", preemptor, "-n", ns, "--wait=false")
    final = e2e.wait_phase(ns, "Succeeded", timeout=600)
    assert final["failures"] == 0 and final["preemptions"] == 1
    assert {T0: uid(e2e, ns, T0), T1: uid(e2e, ns, T1)} == trial_uids
    check_search(e2e, ns)


def test_multi_worker_trial_groups(e2e: Env):
    """Each trial group a MultiWorkerMirrored group of 2 pods (its own TF_CONFIG)."""
    ns = e2e.namespace("pmwms")
    e2e.submit(
        ns,
        search=parallel_search(trials=3, epochs=1),
        distribution={"workers": 2, "gpusPerWorker": 1},
    )
    final = e2e.wait_phase(ns, "Succeeded", timeout=600)
    pods = {p["metadata"]["name"] for p in e2e.kubectl.pods(ns, "search")}
    trial_pods = {f"search-t{g}-worker-{i}" for g in (0, 1) for i in (0, 1)}
    chiefs = {f"search-t{g}-worker-0" for g in (0, 1)}
    # a group completes with its chief; a peer still exiting then, and the oracle, may
    # have been deleted
    assert chiefs <= pods <= trial_pods | {ORACLE}, pods
    assert final["failures"] == 0 and final["trials"] == "3/3"
    check_search(e2e, ns, expected=3)


def test_script_mode_with_two_trial_groups(e2e: Env):
    ns = e2e.namespace("pscript")
    e2e.create_script_configmap(ns)
    e2e.submit_script(ns, parallelTrials=2)
    final = e2e.wait_phase(ns, "Succeeded", timeout=600)
    assert final["failures"] == 0
    done = final["trialsCompleted"]
    assert done == final["trialsTotal"] and done >= 2, final
    # the script's code after search() ran once, in trial group t0
    logs = {p: e2e.kubectl("logs", "-n", ns, p, check=False).stdout for p in (T0, T1, ORACLE)}
    assert "best hyperparameters:" in logs[T0], logs[T0][-3000:]
    assert "best hyperparameters:" not in logs[T1] + logs[ORACLE]
