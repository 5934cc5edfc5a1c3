"""The operator end to end: real control plane, real node agent, real trainer processes.

One undisturbed reference run (the `reference` fixture) and, with the same spec, one
scenario per behaviour. Disruptions hit the trainer mid-trial after a checkpoint."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import tuneop_contract as contract
from tuneop.api.status import parse_time

from tests.checkpoints import committed
from tests.e2e.harness import (
    SEARCH,
    Env,
    Operator,
    fetch_results,
    required_condition,
    sample,
    wait_for,
)
from tests.localcluster import disruption
from tests.localcluster.nodeagent.agent import NodeConfig

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sample_runs_to_completion(e2e: Env, tmp_path: Path):
    """The example from manifests/samples as is (only the namespace differs)."""
    ns = e2e.namespace("sample")
    job = sample("emg-cnn", ns)
    e2e.kubectl.apply(job)
    # the sample names no image: the script takes it from the job's trainer pod
    wait_for(lambda: e2e.kubectl.pods(ns, "emg-cnn"), 60, "the sample's trainer pod")
    early = fetch_results(e2e, ns, "emg-cnn", tmp_path / "early")
    assert early.returncode == 1 and "results.json are written when" in early.stderr, early
    status = e2e.wait_phase(ns, "Succeeded", timeout=400, name="emg-cnn")
    assert status["bestTrial"]["id"] and status["bestTrial"]["hyperparameters"]
    assert isinstance(status["bestTrial"]["score"], float)
    assert status["trialsCompleted"] == status["trialsTotal"] > 0
    assert status["preemptions"] == 0 and status["failures"] == 0
    assert status["observedGeneration"] == 1 and status["completionTime"]
    complete = required_condition(status, "Complete")
    assert complete["status"] == "True" and complete["observedGeneration"] == 1
    table = e2e.kubectl("get", "tj", "-n", ns).stdout.splitlines()
    assert table[0].split() == ["NAME", "STATE", "TRIALS", "BEST", "PREEMPTIONS", "AGE"]
    row = table[1].split()
    done = status["trialsCompleted"]
    assert row[:5] == ["emg-cnn", "Succeeded", f"{done}/{done}", row[3], "0"]
    assert float(row[3]) == pytest.approx(status["bestTrial"]["score"], abs=1e-4)
    assert e2e.reasons(ns, "emg-cnn") == ["Created", "Completed"]
    # The trainer reported its progress to its ConfigMap, the operator copied it; the
    # trainer's token may write that map and nothing of the TuningJob.
    assert status["progress"]["trialsTotal"] == status["trialsTotal"], status["progress"]
    assert status["progress"]["checkpointCostSeconds"] > 0, status["progress"]  # measured
    trainer = f"system:serviceaccount:{ns}:emg-cnn-trainer"

    def can_i(*args: str) -> str:
        return e2e.kubectl("auth", "can-i", *args, "-n", ns, "--as", trainer, check=False).stdout

    assert can_i("patch", "configmaps/emg-cnn-progress").strip() == "yes"
    assert can_i("patch", "tuningjobs.tuneop.io/emg-cnn", "--subresource=status").strip() == "no"
    assert can_i("patch", "tuningjobs.tuneop.io/emg-cnn").strip() == "no"
    assert can_i("patch", "configmaps/emg-cnn-spec").strip() == "no"
    metrics = e2e.operator.metrics()
    assert (
        f'tuneop_tuningjob_phase{{namespace="{ns}",phase="Succeeded",tuningjob="emg-cnn"}} 1.0'
        in (metrics)
    )
    assert f'tuneop_tuningjob_trials_completed{{namespace="{ns}",tuningjob="emg-cnn"}}' in metrics
    # The best trials in status, best first, the first of them the best trial.
    top = status["topTrials"]
    assert 0 < len(top) <= contract.TOP_TRIALS and top[0]["id"] == status["bestTrial"]["id"]
    assert [t["score"] for t in top] == sorted((t["score"] for t in top), reverse=True)
    # The results copied off the claim with the one-line recipe are the claim's files.
    fetched = fetch_results(e2e, ns, "emg-cnn", tmp_path / "out")
    assert fetched.returncode == 0, fetched.stderr
    claim = e2e.claim_dir(ns, "emg-cnn")
    for name in (contract.RESULTS_FILE, contract.BEST_MODEL_FILE):
        assert sha256(tmp_path / "out" / name) == sha256(claim / name), name
    results = json.loads((tmp_path / "out" / contract.RESULTS_FILE).read_text())
    assert results["best"]["trialId"] == status["bestTrial"]["id"]
    wait_for(lambda: not e2e.kubectl.json("get", "pods", "-n", ns, "-l",
                                          "tuneop.io/results-of=emg-cnn")["items"],
             60, "the helper pod's deletion")  # fmt: skip


def _disrupt_and_finish(e2e: Env, reference: dict[str, Any], prefix: str, disrupt: Any) -> None:
    ns = e2e.namespace(prefix)
    e2e.submit(ns)
    e2e.wait_mid_trial(ns)
    pod = "search-worker-0"
    first = e2e.cluster.pod(ns, pod)
    uid = first.metadata.uid
    disrupt(ns, pod)
    status = e2e.wait_status(ns, lambda s: s.get("preemptions", 0) >= 1, 120, "the preemption")
    assert status["failures"] == 0
    restored = e2e.wait_status(ns, lambda s: s.get("restores", 0) >= 1, 240, "the restore")
    # Resumed where it stopped: mid-epoch, or at an epoch boundary if the signal came on
    # an epoch's last step (the trainer then finishes that epoch first).
    resumed = restored["progress"]
    assert (resumed["resumedFromEpoch"], resumed["resumedFromStep"]) > (0, 0), resumed
    new_pod = e2e.cluster.pod(ns, pod)
    assert new_pod is not None and new_pod.metadata.uid != uid
    assert new_pod.metadata.labels["tuneop.io/attempt"] == "1"
    check_mtbf_of_one_loss(restored, first, new_pod)
    final = e2e.wait_phase(ns, "Succeeded", timeout=400)
    assert final["preemptions"] == 1 and final["failures"] == 0 and final["restores"] == 1
    assert final["bestTrial"]["id"] == reference["bestTrial"]["id"]
    assert final["bestTrial"]["score"] == pytest.approx(reference["bestTrial"]["score"], abs=1e-6)
    assert final["bestTrial"]["hyperparameters"] == reference["bestTrial"]["hyperparameters"]
    reasons = e2e.reasons(ns)
    assert reasons == ["Created", "Preempted", "Created", "Restored", "Completed"], reasons
    check_goodput_of_one_loss(e2e, ns, final)


def check_mtbf_of_one_loss(status: dict[str, Any], first: Any, second: Any) -> None:
    """Each pod gets the MTBF of the job as it stood when the pod was built: the first
    the prior plus the time run, the replacement after one loss half of that."""

    def mtbf(pod: Any) -> tuple[float, float]:
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        running = pod.metadata.creation_timestamp - parse_time(status["startTime"])
        return float(env[contract.ENV_MTBF_SECONDS]), running.total_seconds()

    (before, ran_before), (after, ran_after) = mtbf(first), mtbf(second)
    assert before == pytest.approx(contract.mtbf_estimate(ran_before, 0), abs=3)
    assert after == pytest.approx(contract.mtbf_estimate(ran_after, 1), abs=3)
    assert after < before


def check_goodput_of_one_loss(e2e: Env, ns: str, final: dict[str, Any]) -> None:
    """status.goodput of a run with one pod (one GPU) at a time and exactly one loss:
    one recovery; the GPU time lost covers at least the recovery (loss to the next
    step) and the GPU time given fits in the job's life; the exported gauge agrees."""
    goodput = final["goodput"]
    assert goodput["recoveries"] == final["preemptions"] == 1, goodput
    lost, allocated = goodput["lostGpuSeconds"], goodput["allocatedGpuSeconds"]
    assert lost >= goodput["lastRecoverySeconds"] - 0.2 > 0, goodput
    created = e2e.job(ns)["metadata"]["creationTimestamp"]
    life = (parse_time(final["completionTime"]) - parse_time(created)).total_seconds()
    assert lost < allocated <= life + 2, (goodput, life)
    assert goodput["percent"] == pytest.approx(100 * (1 - lost / allocated), abs=0.11)
    metric = f'tuneop_tuningjob_goodput_percent{{namespace="{ns}",tuningjob="search"}}'
    line = next(m for m in e2e.operator.metrics().splitlines() if m.startswith(metric))
    assert float(line.split()[-1]) == pytest.approx(goodput["percent"]), line


def test_pod_deleted_mid_trial_resumes(e2e: Env, reference: dict[str, Any]):
    _disrupt_and_finish(
        e2e,
        reference,
        "deleted",
        lambda ns, pod: disruption.delete_pod(e2e.cluster.api, ns, pod),
    )


def test_pod_evicted_mid_trial_resumes(e2e: Env, reference: dict[str, Any]):
    _disrupt_and_finish(
        e2e,
        reference,
        "evicted",
        lambda ns, pod: disruption.evict_pod(e2e.cluster.api, ns, pod),
    )


def test_pod_preempted_by_the_scheduler_resumes(e2e: Env, reference: dict[str, Any]):
    gpus = int(e2e.cluster.core.read_node("gpu-node-0").status.allocatable["nvidia.com/gpu"])
    preemptor: list[str] = []

    def preempt(ns: str, pod: str) -> None:
        preemptor.append(disruption.preempt_with_priority(e2e.cluster.api, ns, gpus))
        # give the GPUs back once the scheduler has preempted the trainer
        wait_for(lambda: e2e.status(ns).get("preemptions", 0) >= 1, 120, "preemption")
        events = e2e.kubectl.events(ns, "search")
        assert "PreemptionByScheduler" in json.dumps(events)
        e2e.cluster.core.delete_namespaced_pod(preemptor[0], ns, grace_period_seconds=0)

    _disrupt_and_finish(e2e, reference, "preempted", preempt)


def test_failing_trainer_exhausts_the_failure_budget_with_backoff(e2e: Env):
    """A hypermodel reference that imports but is no build(hp) function: every trial
    raises, the trainer exits 1 (a real failure, retried with backoff)."""
    ns = e2e.namespace("failing")
    e2e.submit(
        ns,
        hypermodel="json:dumps",
        failurePolicy={"maxFailures": 1, "backoffSeconds": 5, "maxBackoffSeconds": 5},
        checkpoint={"size": "1Gi", "reclaimPolicy": "Delete"},
    )
    status = e2e.wait_phase(ns, "Failed", timeout=300)
    assert status["failures"] == 2 and status["preemptions"] == 0
    failed = required_condition(status, "Failed")
    assert failed["reason"] == "FailureBudgetExceeded"
    assert "maxFailures=1" in failed["message"]
    assert "TypeError: Object of type HyperParameters is not JSON serializable" in failed["message"]
    events = e2e.kubectl.events(ns, "search")
    assert [e["reason"] for e in events] == [
        "Created", "TrainerFailed", "Created", "FailureBudgetExceeded",
    ]  # fmt: skip
    assert "retry in 5s" in events[1]["message"]
    # backoff: the second pod group started at least backoffSeconds after the failure
    first_failure = events[1]["lastTimestamp"]
    second_start = events[2]["lastTimestamp"]
    from tuneop.api.status import parse_time

    gap = (parse_time(second_start) - parse_time(first_failure)).total_seconds()
    assert gap >= 4, gap
    # deleting the job removes its children; reclaimPolicy Delete removes the claim too
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--timeout=60s")
    left = e2e.kubectl("get", "pods,svc,cm,pvc,sa,role", "-n", ns, "-o", "name").stdout.split()
    assert [name for name in left if "search" in name] == []


def test_unimportable_hypermodel_fails_at_once_with_the_trainers_message(e2e: Env):
    """The trainer exits 2 (invalid spec): retrying cannot help, so no failure budget."""
    ns = e2e.namespace("unimportable")
    e2e.submit(ns, hypermodel="tuneop_trainer.examples.no_such_module:Nothing")
    status = e2e.wait_phase(ns, "Failed", timeout=300)
    failed = required_condition(status, "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "spec.hypermodel" in failed["message"] and "no_such_module" in failed["message"]
    assert status["failures"] == 0 and status["attempt"] == 0
    assert e2e.reasons(ns) == ["Created", "InvalidSpec"]


def test_operator_restart_mid_run_creates_no_duplicates(e2e: Env, reference: dict[str, Any]):
    ns = e2e.namespace("restart")
    e2e.submit(ns)
    e2e.wait_mid_trial(ns)
    uid = e2e.cluster.pod(ns, "search-worker-0").metadata.uid
    e2e.operator.kill()
    e2e.operator.start()
    # kopf lists the trainer pods and progress maps (indexed) before it starts a job's
    # loop: the first pass of every job trusts that listing, none reads live
    counters = wait_for(lambda: _passed(e2e.operator), 60, "a first pass", every=0.1)
    assert counters["tuneop_reconcile_live_reads_total"] == 0, counters
    final = e2e.wait_phase(ns, "Succeeded", timeout=400)
    pods = e2e.kubectl.pods(ns, "search")
    assert [p["metadata"]["uid"] for p in pods] == [uid]
    assert final["preemptions"] == 0 and final["restarts"] == 0
    assert final["bestTrial"]["id"] == reference["bestTrial"]["id"]
    assert e2e.reasons(ns) == ["Created", "Completed"]


def _passed(operator: Operator) -> dict[str, float] | None:
    """The operator's pass counters once it has completed a pass."""
    counters = operator.counters(
        "tuneop_reconcile_passes_total", "tuneop_reconcile_live_reads_total"
    )
    return counters if counters.get("tuneop_reconcile_passes_total", 0) >= 1 else None


def test_suspend_resume_and_delete_keeps_the_retained_claim(e2e: Env, reference: dict[str, Any]):
    ns = e2e.namespace("suspend")
    e2e.submit(ns)
    e2e.wait_mid_trial(ns)
    e2e.kubectl(
        "patch", "tj", "search", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    status = e2e.wait_status(
        ns, lambda s: s.get("phase") == "Suspended" and s.get("message") == "suspended", 120,
        "suspended with no pods",
    )  # fmt: skip
    assert required_condition(status, "Suspended")["status"] == "True"
    assert e2e.kubectl.pods(ns, "search") == []
    e2e.kubectl(
        "patch",
        "tj",
        "search",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec":{"suspend":false,"checkpoint":{"intervalSteps":5}}}',
    )
    final = e2e.wait_phase(ns, "Succeeded", timeout=400)
    # a spec change made while suspended reaches the trainer's spec file
    spec_file = e2e.kubectl.json("get", "cm", "search-spec", "-n", ns)["data"]["spec.yaml"]
    assert "intervalSteps: 5" in spec_file
    assert final["preemptions"] == 0 and final["failures"] == 0 and final["restores"] == 1
    assert final["bestTrial"]["id"] == reference["bestTrial"]["id"]
    assert e2e.reasons(ns) == [
        "Created",
        "Suspended",
        "Resumed",
        "Created",
        "Restored",
        "Completed",
    ]
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--timeout=60s")
    left = e2e.kubectl("get", "pods,svc,cm,pvc,sa,role", "-n", ns, "-o", "name").stdout.split()
    assert [name for name in left if "search" in name] == ["persistentvolumeclaim/search-ckpt"]


def test_operator_side_invalid_spec_gets_a_condition_and_an_event(e2e: Env):
    ns = e2e.namespace("invalid")
    e2e.submit(ns, env=[{"name": "TF_CONFIG", "value": "{}"}])
    status = e2e.wait_phase(ns, "Failed", timeout=60)
    failed = required_condition(status, "Failed")
    assert failed["reason"] == "InvalidSpec" and "spec.env[0].name" in failed["message"]
    events = e2e.kubectl.events(ns, "search")
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "InvalidSpec")]
    assert "spec.env[0].name: TF_CONFIG is reserved" in events[0]["message"]
    assert e2e.kubectl.pods(ns, "search") == []


def test_a_second_replica_stands_by(e2e: Env, tmp_path):
    """kopf peering: a replica of lower priority pauses while the active one runs."""
    standby = Operator(
        e2e.cluster.control_plane.kubeconfig, tmp_path / "standby.log", TUNEOP_OPERATOR_PRIORITY="0"
    ).start()
    try:
        wait_for(
            lambda: (
                len(e2e.kubectl.json("get", "clusterkopfpeering", "tuneop").get("status") or {})
                >= 2
            ),
            60,
            "both replicas in the peering object",
        )
        ns = e2e.namespace("standby")
        e2e.submit(ns, env=[{"name": "TUNEOP_X", "value": "1"}])  # invalid: handled at once
        e2e.wait_phase(ns, "Failed", timeout=60)
        assert "InvalidSpec" not in standby.log_tail(400)
        assert e2e.reasons(ns) == ["InvalidSpec"]  # one Event: only one replica acted
    finally:
        standby.stop()


def test_ttl_deletes_a_finished_job(e2e: Env):
    ns = e2e.namespace("ttl")
    # an operator-side InvalidSpec finishes (Failed) at once, without a trainer
    e2e.submit(ns, env=[{"name": "TUNEOP_JOB_NAME", "value": "x"}], ttlSecondsAfterFinished=3)
    e2e.wait_phase(ns, "Failed", timeout=60)
    wait_for(lambda: e2e.kubectl.job(ns, "search") is None, 60, "the TTL deletion")


def test_a_multi_worker_group_is_recreated_together(e2e: Env):
    """Two workers (MultiWorkerMirroredStrategy via TF_CONFIG and a headless Service):
    losing one replaces both, counted as one preemption; the new group resumes and the
    search completes."""
    ns = e2e.namespace("multi")
    e2e.submit(
        ns,
        distribution={"strategy": "Auto", "workers": 2, "gpusPerWorker": 1},
        data={"synthetic": {"samples": 256, "seed": 0}, "validationSplit": 0.25},
        terminationGracePeriodSeconds=10,
    )
    e2e.wait_status(
        ns,
        lambda s: (
            s.get("phase") == "Running" and required_condition(s, "Running")["status"] == "True"
        ),
        120,
        "both workers running",
    )
    pods = {p["metadata"]["name"]: p for p in e2e.kubectl.pods(ns, "search")}
    assert sorted(pods) == ["search-worker-0", "search-worker-1"]
    hosts = [f"search-worker-{i}.search-workers.{ns}.svc:2222" for i in range(2)]
    for i in range(2):
        env = pods[f"search-worker-{i}"]["spec"]["containers"][0]["env"]
        tf_config = json.loads(next(e["value"] for e in env if e["name"] == "TF_CONFIG"))
        assert tf_config == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
    assert e2e.kubectl("get", "svc", "search-workers", "-n", ns, check=False).returncode == 0
    disruption.delete_pod(e2e.cluster.api, ns, "search-worker-1")
    status = e2e.wait_status(ns, lambda s: s.get("attempt") == 1, 120, "a new pod group")
    assert status["preemptions"] == 1 and status["failures"] == 0

    def recreated() -> list[dict[str, Any]] | None:
        new = e2e.kubectl.pods(ns, "search")
        ok = len(new) == 2 and all(p["metadata"]["labels"]["tuneop.io/attempt"] == "1" for p in new)
        return new if ok else None

    new = wait_for(recreated, 120, "both workers recreated")
    assert not {p["metadata"]["uid"] for p in new} & {p["metadata"]["uid"] for p in pods.values()}
    final = e2e.wait_phase(ns, "Succeeded", timeout=400)
    assert final["preemptions"] == 1 and final["failures"] == 0
    assert final["trialsCompleted"] == final["trialsTotal"] > 0
    assert final["bestTrial"]["id"] and isinstance(final["bestTrial"]["score"], float)
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--timeout=60s")
    # the job is gone at once; its pods stop gracefully (the trainer's checkpoint)
    assert e2e.kubectl("get", "svc", "-n", ns, "-o", "name").stdout.split() == []
    wait_for(lambda: e2e.kubectl.pods(ns, "search") == [], 90, "the worker pods gone")


def test_node_loss_is_a_preemption_and_the_trainer_resumes(e2e: Env, reference: dict[str, Any]):
    """The trainer's node crashes (processes SIGKILLed: no checkpoint at exit, the last
    periodic one is used); the taint manager evicts the pod, the node comes back, the
    operator recreates the trainer, which resumes and finds the reference's best trial."""
    node = "crash-node"
    e2e.cluster.add_node(NodeConfig(name=node, gpus=1))
    try:
        ns = e2e.namespace("nodeloss")
        e2e.submit(ns, nodeSelector={"kubernetes.io/hostname": node})
        # SIGKILL leaves only the periodic checkpoints: wait until this trial has one
        # (every intervalSteps steps) committed on the claim (they are written in the
        # background), or it would rightly start the trial over.
        at = e2e.wait_mid_trial(ns, min_step=SEARCH["checkpoint"]["intervalSteps"] + 2)
        execution = e2e.claim_dir(ns) / "trials" / "search" / str(at["trial_id"]) / "fit-0"
        wait_for(lambda: committed(execution), 10, f"a checkpoint committed in {execution}", 0.05)
        disruption.crash_node(e2e.cluster, node)
        wait_for(
            lambda: any(
                p["metadata"].get("deletionTimestamp") for p in e2e.kubectl.pods(ns, "search")
            ),
            180,
            "the taint manager's eviction",
        )
        # the pod is Terminating on a lost node: the operator waits, counts nothing yet,
        # and says what to do about it
        status = e2e.wait_status(
            ns, lambda s: "is terminating on node" in s["message"], 30, "the lost-node message"
        )
        assert status["preemptions"] == 0
        running = required_condition(status, "Running")
        assert running["reason"] == "TerminatingOnUnreachableNode"
        assert "node.kubernetes.io/out-of-service" in running["message"]
        disruption.recover_node(e2e.cluster, node)
        final = e2e.wait_phase(ns, "Succeeded", timeout=400)
        assert final["preemptions"] == 1 and final["failures"] == 0 and final["restores"] == 1
        assert final["bestTrial"]["id"] == reference["bestTrial"]["id"]
        preempted = [e for e in e2e.kubectl.events(ns, "search") if e["reason"] == "Preempted"]
        assert len(preempted) == 1 and "DeletionByTaintManager" in preempted[0]["message"]
    finally:
        e2e.cluster.remove_node(node)
