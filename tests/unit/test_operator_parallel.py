"""The decision of a job with parallel trials, driven through scenarios: each pod group
(the oracle, trial groups t0, t1) is created, counted and recreated on its own."""

from __future__ import annotations

import json
from typing import Any

import tuneop_contract as contract
from tuneop.api import names
from tuneop.api import status as st
from tuneop.api.groups import pod_groups
from tuneop.api.spec import validate
from tuneop.decide.patch import Decision
from tuneop.decide.reconcile import decide, nodes_to_read
from tuneop.decide.refusal import POD_REJECTED
from tuneop.render import children, trainer_pods
from tuneop_contract.spec import DEFAULT_GPU_RESOURCE, JobSpec

from tests.unit.fakes import QUOTA_REFUSAL
from tests.unit.operator_world import World, observed

ORACLE, T0, T1 = "j-oracle", "j-t0-worker-0", "j-t1-worker-0"
EVICTED = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}


class ParallelWorld(World):
    def __init__(self, workers: int = 1, **spec: Any) -> None:
        super().__init__(workers, parallelTrials=2, **spec)
        self.reported = {"data": {}}
        self.records: dict[str, dict[str, Any]] = {}

    def step(self, seconds: float = 2) -> Decision:
        d = super().step(seconds)
        assert not d.create_pods  # the sequential group is never used
        return d

    @property
    def groups(self) -> dict[str, dict[str, Any]]:
        return {e["name"]: e for e in self.status.get("groups", [])}

    def report_as(self, tuner_id: str, **fields: Any) -> None:
        record = contract.Progress(**fields)
        record.last_progress_time = st.rfc3339(self.now)
        data = dict((self.reported or {}).get("data") or {})
        data[contract.progress_key(tuner_id)] = json.dumps(record.to_status())
        self.reported = {"data": data}

    def uid(self, pod: str) -> Any:
        return self.pods[pod]["metadata"].get("uid")


def start(w: ParallelWorld) -> None:
    d = w.step()
    assert d.ensure_children and not d.reset_progress
    assert sorted(n for n, _ in d.create_groups) == ["oracle", "t0", "t1"]
    for i, pod in enumerate(w.pods.values()):
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}-{i}"
    w.run_pods()
    w.step()
    assert w.status["phase"] == st.PHASE_RUNNING


def test_every_group_starts_and_the_job_runs():
    w = ParallelWorld()
    start(w)
    assert sorted(w.pods) == [ORACLE, T0, T1]
    assert [e["name"] for e in w.status["groups"]] == ["oracle", "t0", "t1"]
    assert all(e["attempt"] == 0 and e["state"] == "Running" for e in w.status["groups"])
    assert w.condition(st.COND_RUNNING)["reason"] == "TrialsRunning"
    w.report_as("chief", trials_completed=2, trials_total=6, best_trial_id="01", best_score=0.9)
    w.report_as("tuner0", trial_id="02", step=5)
    w.report_as("tuner1", trial_id="03", step=9)
    w.step()
    assert w.status["trials"] == "2/6" and w.status["bestTrial"]["id"] == "01"
    assert w.groups["t0"]["trialId"] == "02" and w.groups["t1"]["step"] == 9
    assert w.status["currentTrial"] == "02,03"
    assert "t0 trial 02 step 5" in w.status["message"]
    assert "t1 trial 03 step 9" in w.status["message"]


def test_a_preempted_trial_group_is_recreated_alone_and_resumes():
    w = ParallelWorld()
    start(w)
    w.report_as("tuner1", trial_id="03", step=9)
    w.step()
    others = {ORACLE: w.uid(ORACLE), T0: w.uid(T0)}
    w.pods[T1]["status"]["conditions"] = [EVICTED]
    w.vanish(T1)
    d = w.step()
    assert d.delete_pods == []
    assert w.status["preemptions"] == 1 and w.status["failures"] == 0
    assert w.groups["t1"]["attempt"] == 1 and w.groups["t1"]["preemptions"] == 1
    assert w.groups["t0"]["attempt"] == 0 and "preemptions" not in w.groups["t0"]
    assert "trial group t1 pod group 0 disrupted" in w.events[-1][2]
    assert w.status["phase"] == st.PHASE_RUNNING  # t0 still trains
    d = w.step()
    assert d.create_groups == [("t1", 1)]
    assert w.pods[T1]["metadata"]["labels"][names.LABEL_ATTEMPT] == "1"
    assert {p: w.uid(p) for p in others} == others  # the other groups keep their pods
    w.run_pods()
    w.step()
    assert w.status["restores"] == 0  # the old record does not count
    w.report_as("tuner1", trial_id="03", step=10, resumed_from_step=9, resumed_from_epoch=0)
    w.step()
    assert w.status["restores"] == 1 and w.groups["t1"]["restores"] == 1
    assert w.reasons()[-1] == "Restored" and "trial group t1" in w.events[-1][2]
    assert "resumed trial 03 at step 9" in w.events[-1][2]


def test_the_oracle_lost_is_recreated_while_trial_groups_keep_running():
    w = ParallelWorld()
    start(w)
    trial_uids = {T0: w.uid(T0), T1: w.uid(T1)}
    w.terminate(ORACLE, 75)
    w.step()
    assert w.groups["oracle"]["attempt"] == 1 and w.status["preemptions"] == 1
    d = w.step()
    assert d.create_groups == [] and w.groups["oracle"]["state"] == "Waiting"  # old pod going
    w.gc_deleted()
    d = w.step()
    assert d.create_groups == [("oracle", 1)]
    assert {p: w.uid(p) for p in trial_uids} == trial_uids
    assert w.status["phase"] == st.PHASE_RUNNING


def test_a_failed_group_backs_off_alone():
    w = ParallelWorld()
    start(w)
    w.terminate(T0, 1, "boom")
    w.step()
    assert w.status["failures"] == 1 and w.groups["t0"]["failures"] == 1
    assert w.groups["t0"]["nextRetryTime"] and "nextRetryTime" not in w.groups["t1"]
    w.gc_deleted()
    d = w.step()
    assert d.create_groups == [] and w.groups["t0"]["state"] == "Waiting"
    d = w.step(10)
    assert d.create_groups == [("t0", 1)]


def test_the_job_succeeds_when_every_trial_group_completed():
    w = ParallelWorld()
    start(w)
    w.terminate(T1, 0)
    w.step()
    assert w.groups["t1"]["state"] == "Succeeded" and w.status["phase"] == st.PHASE_RUNNING
    summary = contract.FinalSummary(trials_completed=6, trials_total=6, best_trial_id="04",
                                    best_score=0.97)  # fmt: skip
    w.terminate(T0, 0, summary.to_message())
    d = w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED
    assert w.groups["t0"]["state"] == w.groups["t1"]["state"] == "Succeeded"
    assert w.status["trials"] == "6/6" and w.status["bestTrial"]["id"] == "04"
    assert [r.name for r in d.delete_pods] == [ORACLE]  # still serving: stopped
    # a completed group is never recreated, even if its pod goes
    w.vanish(T1)
    d = w.step()
    assert not d.create_groups


def test_the_top_trials_come_from_the_oracles_record_then_t0s_summary():
    w = ParallelWorld()
    start(w)
    top = [{"trialId": "03", "score": 0.9, "hyperparameters": {"units": 8}}]
    w.report_as("tuner1", trial_id="05", top_trials=[{"trialId": "x", "score": 1.0}])
    w.report_as(contract.ORACLE_TUNER_ID, trials_completed=3, trials_total=6, top_trials=top)
    w.step()
    assert w.status["topTrials"] == [{"id": "03", "score": 0.9, "hyperparameters": {"units": 8}}]
    w.terminate(T1, 0)
    w.step()
    final = [{"trialId": "04", "score": 0.97, "hyperparameters": {}}, *top]
    summary = contract.FinalSummary(trials_completed=6, trials_total=6, best_trial_id="04",
                                    best_score=0.97, top_trials=final)  # fmt: skip
    w.terminate(T0, 0, summary.to_message())
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED
    assert [t["id"] for t in w.status["topTrials"]] == ["04", "03"]


def test_the_preemption_budget_counts_every_group():
    w = ParallelWorld()
    start(w)
    for pod in (T0, T1, ORACLE):
        w.pods[pod]["status"]["conditions"] = [EVICTED]
        w.vanish(pod)
        w.step()
        w.step()
        w.run_pods()
    assert w.status["phase"] == st.PHASE_FAILED
    assert w.condition(st.COND_FAILED)["reason"] == "PreemptionBudgetExceeded"


def test_suspend_stops_every_group_and_resume_recreates_them():
    w = ParallelWorld()
    start(w)
    w.job["spec"]["suspend"] = True
    d = w.step()
    assert sorted(r.name for r in d.delete_pods) == [ORACLE, T0, T1]
    assert all(e["attempt"] == 1 and not e["started"] for e in w.status["groups"])
    w.gc_deleted()
    w.job["spec"]["suspend"] = False
    d = w.step()
    assert sorted(d.create_groups) == [("oracle", 1), ("t0", 1), ("t1", 1)]


def test_a_stalled_trial_group_makes_the_job_stalled():
    w = ParallelWorld(stallTimeoutSeconds=60)
    start(w)
    w.report_as("tuner0", trial_id="02", step=5)
    for _ in range(40):
        w.report_as("tuner0", trial_id="02", step=5)
        w.step()
    assert w.condition(st.COND_STALLED)["status"] == "True"
    assert "trial group t1" in w.condition(st.COND_STALLED)["message"]


def test_a_trial_out_of_memory_is_recorded_and_only_its_group_recreated():
    w = ParallelWorld()
    start(w)
    w.report_as("tuner1", trial_id="03", step=2)
    w.step()
    w.terminate(T1, 137)
    w.pods[T1]["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = "OOMKilled"
    w.step()
    assert w.status["oomTrials"] == ["03"] and w.status["trialOOMs"] == 1
    assert w.status["failures"] == 0 and w.groups["t1"]["attempt"] == 1
    w.gc_deleted()
    w.step()
    env = {e["name"]: e.get("value") for e in w.pods[T1]["spec"]["containers"][0]["env"]}
    assert env[contract.ENV_FAILED_TRIALS] == "03:OOMKilled"


def test_nodes_are_read_for_every_running_group():
    w = ParallelWorld()
    start(w)
    for i, pod in enumerate(w.pods.values()):
        pod["spec"]["nodeName"] = f"n{i}"
    assert nodes_to_read(w.job, list(w.pods.values())) == ["n0", "n1", "n2"]


def test_pods_of_a_parallel_job():
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"}}
    spec = JobSpec.from_dict({"image": "img", "parallelTrials": 2, "script": {"path": "/s.py"},
                              "distribution": {"workers": 2, "gpusPerWorker": 1}})  # fmt: skip
    oracle, _, t1 = pod_groups("j", spec)
    assert oracle.pod_names == (ORACLE,) and t1.pod_names == ("j-t1-worker-0", "j-t1-worker-1")
    pod = trainer_pods.build_pod(job, spec, 0, 0, group=oracle)
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[contract.ENV_TUNER_ID] == "chief" and contract.ENV_TF_CONFIG not in env
    assert env[contract.ENV_ORACLE_IP] == "j-oracle.j-workers.ns.svc"
    assert env[contract.ENV_ORACLE_PORT] == str(contract.DEFAULT_ORACLE_PORT)
    assert DEFAULT_GPU_RESOURCE not in str(container["resources"])
    assert container["resources"] == {"requests": {"cpu": "250m", "memory": "1Gi"}}
    assert pod["spec"]["hostname"] == ORACLE and pod["spec"]["subdomain"] == "j-workers"
    assert not any(t.get("key") == DEFAULT_GPU_RESOURCE for t in pod["spec"]["tolerations"])
    assert pod["metadata"]["labels"][names.LABEL_GROUP] == "oracle"
    pod = trainer_pods.build_pod(job, spec, 1, 3, group=t1)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env[contract.ENV_TUNER_ID] == "tuner1" and env[contract.ENV_TRIAL_GROUPS] == "2"
    tf_config = json.loads(env[contract.ENV_TF_CONFIG])
    assert tf_config["cluster"]["worker"] == [
        "j-t1-worker-0.j-workers.ns.svc:2222",
        "j-t1-worker-1.j-workers.ns.svc:2222",
    ]
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert pod["spec"]["containers"][0]["resources"]["limits"][DEFAULT_GPU_RESOURCE] == 1
    service = children.build_service(job)
    assert {p["port"] for p in service["spec"]["ports"]} == {2222, contract.DEFAULT_ORACLE_PORT}
    assert any(c["kind"] == "Service" for c in children.build_children(job, spec))


def test_the_shared_claim_must_be_read_write_many():
    spec = JobSpec.from_dict({"image": "i", "parallelTrials": 3, "hypermodel": "m:H"})
    assert spec.checkpoint.access_modes == ("ReadWriteMany",)
    assert not validate(spec)
    bad = JobSpec.from_dict({"image": "i", "parallelTrials": 3, "hypermodel": "m:H",
                             "checkpoint": {"accessModes": ["ReadWriteOnce"]}})  # fmt: skip
    assert [e.field for e in validate(bad)] == ["spec.checkpoint.accessModes"]
    one_pod = JobSpec.from_dict({"image": "i", "hypermodel": "m:H", "distribution": {"workers": 2},
                                 "checkpoint": {"accessModes": ["ReadWriteOncePod"]}})  # fmt: skip
    assert "one pod only" in str(validate(one_pod)[0])
    env = [{"name": "KERASTUNER_TUNER_ID", "value": "x"}]
    reserved = JobSpec.from_dict({"image": "i", "hypermodel": "m:H", "env": env})
    assert "reserved" in str(validate(reserved)[0])


def test_an_existing_claim_that_is_not_read_write_many_is_an_invalid_spec():
    w = ParallelWorld(checkpoint={"existingClaim": "data"})
    claim = {"spec": {"accessModes": ["ReadWriteOnce"]}}
    d = decide(observed(w.job, [], now=w.now, claim=claim))
    assert not d.create_groups
    failed = st.get_condition(d.status["conditions"], st.COND_FAILED)
    assert failed is not None and failed["reason"] == "InvalidSpec"
    assert "spec.checkpoint.existingClaim" in failed["message"]
    assert "ReadWriteMany" in failed["message"]
    ok = decide(observed(w.job, [], now=w.now, claim={"spec": {"accessModes": ["ReadWriteMany"]}}))
    assert sorted(n for n, _ in ok.create_groups) == ["oracle", "t0", "t1"]


def test_a_trial_group_the_quota_refuses_waits_alone_then_fails_the_job_by_policy():
    w = ParallelWorld(pendingTimeoutSeconds=60, stallPolicy="Fail")
    start(w)
    w.pods[T1]["status"]["conditions"] = [EVICTED]
    w.vanish(T1)
    w.step()
    assert w.status["preemptions"] == 1
    w.kube.refuse_pods = QUOTA_REFUSAL
    d = w.step()
    assert T1 not in w.pods and not d.create_groups
    t1 = w.groups["t1"]
    assert t1["state"] == "Pending" and "exceeded quota: gpus" in t1["message"]
    assert t1["podsRefused"]["reason"] == POD_REJECTED and not t1.get("started")
    assert w.status["phase"] == st.PHASE_RUNNING  # t0 still trains
    assert w.condition(st.COND_RUNNING)["reason"] == "TrialsRunning"
    assert "t1 pending (pod j-t1-worker-0 was refused" in w.status["message"]
    assert w.reasons()[-1] == POD_REJECTED
    w.step(61)
    assert w.status["phase"] == st.PHASE_FAILED
    failed = w.condition(st.COND_FAILED)["message"]
    assert "trial group t1: PodRejected for 61s (pendingTimeoutSeconds=60)" in failed
    assert all(p["metadata"].get("deletionTimestamp") for p in w.pods.values())


def test_a_refused_trial_group_starts_once_the_quota_allows():
    w = ParallelWorld(pendingTimeoutSeconds=60)
    start(w)
    w.vanish(T1)
    w.step()
    w.kube.refuse_pods = QUOTA_REFUSAL
    w.step()
    w.step(61)
    assert w.condition(st.COND_STALLED)["reason"] == POD_REJECTED
    assert w.status["phase"] == st.PHASE_RUNNING  # stallPolicy Ignore: the others go on
    w.kube.refuse_pods = None
    d = w.step()
    assert d.create_groups == [("t1", 1)] and "podsRefused" not in w.groups["t1"]
    w.run_pods()
    w.step()
    assert w.condition(st.COND_STALLED)["status"] == "False"
    assert w.groups["t1"]["state"] == "Running"


def test_groups_created_whole_before_a_refused_one_start():
    """Room for two pods: the oracle and t0 are created and start; t1 is refused and
    waits alone, with one Warning Event."""
    w = ParallelWorld(pendingTimeoutSeconds=600)
    w.kube.pod_quota = 2
    w.step()
    assert w.groups["oracle"]["started"] and w.groups["t0"]["started"]
    assert not w.groups["t1"].get("started") and w.groups["t1"]["podsRefused"]
    assert sorted(w.pods) == [ORACLE, T0] and w.reasons().count(POD_REJECTED) == 1
    w.run_pods()
    w.step()
    assert w.groups["t0"]["state"] == "Running" and w.groups["t1"]["state"] == "Pending"
