"""A job deleted and re-created under the same name keeps its retained claim, but the
new job does not continue the old search unless asked (spec.checkpoint.adopt): the
trainer finds the old job's uid recorded on the volume and refuses, the operator reports
it as the job's Failed condition and an Event, and no pod of the old job is adopted.
Nor does the old job's TTL deletion remove the new one."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest
from tuneop.act import executor
from tuneop.act.kube import Kube
from tuneop.decide.patch import Decision
from tuneop_contract import OWNER_FILE

from tests.e2e.harness import Env, required_condition, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]


def reasons_of(e2e: Env, ns: str, uid: str) -> list[str]:
    return [
        e["reason"]
        for e in e2e.kubectl.events(ns, "search")
        if e["involvedObject"].get("uid") == uid
    ]


def test_a_recreated_job_resumes_the_old_search_only_when_adopting(
    e2e: Env, reference: dict[str, Any]
):
    ns = e2e.namespace("identity")
    e2e.submit(ns)
    old_uid = e2e.job(ns)["metadata"]["uid"]
    e2e.wait_mid_trial(ns)  # a trial done and one under way, checkpointed, on the claim
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--timeout=90s")
    assert e2e.kubectl("get", "pvc", "search-ckpt", "-n", ns, check=False).returncode == 0

    e2e.submit(ns)  # same name, same spec, same retained claim
    new_uid = e2e.job(ns)["metadata"]["uid"]
    assert new_uid != old_uid
    status = e2e.wait_phase(ns, "Failed", timeout=180)
    failed = required_condition(status, "Failed")
    assert failed["reason"] == "InvalidSpec", failed
    message = failed["message"]  # the trainer's line, after the pod's name
    assert "search-worker-0: spec.checkpoint.adopt: the checkpoint volume holds" in message
    assert f"TuningJob {ns}/search (uid {old_uid}, the same search spec)" in message
    assert "set spec.checkpoint.adopt: true" in message
    assert reasons_of(e2e, ns, new_uid) == ["Created", "InvalidSpec"]
    # not continued: the refused trainer restored nothing and counted nothing
    assert status.get("restores", 0) == 0 and not status.get("trialsCompleted")
    assert status["failures"] == 0  # exit 2: no failure budget spent
    for pod in e2e.kubectl.pods(ns, "search"):  # only the new job's pods, never the old
        owners = [ref["uid"] for ref in pod["metadata"].get("ownerReferences") or []]
        assert owners == [new_uid], pod["metadata"]

    patch = {"spec": {"checkpoint": {"adopt": True}}}
    e2e.kubectl("patch", "tj", "search", "-n", ns, "--type=merge", "-p", json.dumps(patch))
    final = e2e.wait_phase(ns, "Succeeded", timeout=400)
    assert final["restores"] == 1, final  # the old search, continued from its checkpoint
    assert final["trialsCompleted"] == reference["trialsCompleted"]
    assert final["bestTrial"]["id"] == reference["bestTrial"]["id"]
    assert final["bestTrial"]["score"] == pytest.approx(reference["bestTrial"]["score"], abs=1e-6)
    assert reasons_of(e2e, ns, new_uid)[-1] == "Completed"
    # the volume is the new job's now: its record names the new uid
    owner = json.loads((e2e.claim_dir(ns) / OWNER_FILE).read_text())
    assert owner["uid"] == new_uid and owner["adoptedFrom"] == [old_uid], owner
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--wait=false")


def _operator_client(e2e: Env) -> Kube:
    """The operator's own API client, on the test cluster."""
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(e2e.kubectl.kubeconfig), client_configuration=configuration
    )
    return Kube(configuration)


def test_a_ttl_deletion_in_flight_spares_a_job_recreated_under_its_name(e2e: Env):
    """ttlSecondsAfterFinished deletes the job its pass read, by uid: a job deleted and
    re-created under the same name between that read and the delete is a new job, and
    stays. The window is a few milliseconds of the running operator's pass, so the pass's
    last step is run here: the operator's executor, with the decision and the job as
    that pass read them, against the real API server once the name has a new job."""
    ns = e2e.namespace("ttl-race")
    # an operator-side InvalidSpec finishes (Failed) at once, without a trainer
    env = [{"name": "TUNEOP_JOB_NAME", "value": "x"}]
    e2e.submit(ns, env=env, ttlSecondsAfterFinished=3600)
    e2e.wait_phase(ns, "Failed", timeout=60)
    kube = _operator_client(e2e)
    read = kube.get_job(ns, "search")  # the pass's read, TTL reached
    assert read is not None
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--timeout=60s")
    e2e.submit(ns, suspend=True)  # the user's new job under the same name
    new_uid = e2e.job(ns)["metadata"]["uid"]
    assert new_uid != read["metadata"]["uid"]
    ttl_reached = Decision(delete_job=True)
    executor.apply(kube, read, ttl_reached)
    assert e2e.job(ns)["metadata"]["uid"] == new_uid  # not deleted
    # the same step on a read of the new job does delete it: the precondition is what spared it
    executor.apply(kube, kube.get_job(ns, "search") or {}, ttl_reached)
    wait_for(lambda: e2e.kubectl.job(ns, "search") is None, 60, "the new job's deletion")
