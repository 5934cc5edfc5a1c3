"""The order in which tuneop.act.executor.apply carries out a Decision (what makes a crash at
any instant safe): children, pods, status, deletions, events, job deletion. The API layer
is the in-memory FAKE tests/unit/fakes.py:FakeKube, which records the calls: the ordering
is the property under test; the real API calls are exercised by tests/e2e."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from tuneop.act import executor
from tuneop.api import names
from tuneop.api.events import Event
from tuneop.api.spec import job_spec
from tuneop.decide.desired import rendered
from tuneop.decide.patch import Decision, PodRef
from tuneop.render import children
from tuneop.run.config import Config
from tuneop.run.runtime import Runtime

from tests.unit.fakes import FakeKube, Obj, stored_object

JOB = {
    "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
    "spec": {"image": "img", "hypermodel": "m:H", "distribution": {"workers": 2}},
}


def child(kind: str, name: str, **fields: Any) -> Obj:
    """The job's own child `name` as the API server holds it (uid "child-uid"), with
    `fields` beside its metadata."""
    return {**stored_object(kind, name, JOB["metadata"]["uid"], uid="child-uid"), **fields}


def pod_of_group(attempt: str) -> dict[tuple[str, str], Obj]:
    """The job's pod j-worker-0, of pod group `attempt`, as the only object held."""
    labels = {names.LABEL_ATTEMPT: attempt}
    pod = stored_object("Pod", "j-worker-0", JOB["metadata"]["uid"], uid="child-uid", **labels)
    return {("Pod", "j-worker-0"): pod}


OLD_SPEC = {"spec.yaml": "old: spec\n"}
"""A ConfigMap's data that differs from what the job's spec builds."""


def test_apply_order_create_then_status_then_delete_then_events():
    fake = FakeKube()
    decision = Decision(
        status={"attempt": 1, "attemptStarted": True},
        events=[Event("Normal", "Created", "x")],
        ensure_children=True,
        create_pods=[0, 1],
        create_attempt=1,
        delete_pods=[PodRef("old", "uid-old")],
        delete_job=True,
    )
    executor.apply(fake, JOB, rendered(decision, JOB, job_spec(JOB)))
    assert fake.calls == [
        ("create", "PersistentVolumeClaim/j-ckpt"),
        ("create", "ConfigMap/j-spec"),
        ("create", "ConfigMap/j-progress"),
        ("create", "ServiceAccount/j-trainer"),
        ("create", "Role/j-trainer"),
        ("create", "RoleBinding/j-trainer"),
        ("create", "Service/j-workers"),
        ("create", "Pod/j-worker-0"),
        ("create", "Pod/j-worker-1"),
        ("patch_status", "attempt,attemptStarted"),
        ("delete", "Pod/old"),
        ("event", "Created"),
        ("delete", "TuningJob/j"),
    ]


def test_a_later_groups_children_are_read_not_created_again():
    """After the first pod group (status.startTime), the children exist: each is read
    once, and only a missing one is created; before it, each is created at once."""
    started = {**JOB, "status": {"startTime": "2026-01-01T00:00:00Z", "attempt": 0}}
    decision = Decision(ensure_children=True, create_pods=[0, 1], create_attempt=1)
    first = FakeKube()
    executor.apply(first, JOB, rendered(decision, JOB, job_spec(JOB)))
    created = [c for c in first.calls if c[0] == "create" and not c[1].startswith("Pod/")]
    assert len(created) == 7
    again = FakeKube({key: obj for key, obj in first.objects.items() if key[0] != "Pod"})
    del again.objects[("RoleBinding", "j-trainer")]
    executor.apply(again, started, rendered(decision, started, job_spec(started)))
    assert [c for c in again.calls if c[0] == "create" and not c[1].startswith("Pod/")] == [
        ("create", "RoleBinding/j-trainer"),
    ]
    assert [c for c in again.calls if c[0] == "create"][-2:] == [
        ("create", "Pod/j-worker-0"), ("create", "Pod/j-worker-1"),
    ]  # fmt: skip


def test_a_pod_of_an_older_group_blocks_the_status_patch():
    fake = FakeKube(pod_of_group("0"))
    decision = Decision(status={"attemptStarted": True}, create_pods=[0], create_attempt=1)
    with pytest.raises(executor.StaleGroup):
        executor.apply(fake, JOB, rendered(decision, JOB, job_spec(JOB)))
    assert ("patch_status", "attemptStarted") not in fake.calls
    same_group = FakeKube(pod_of_group("1"))  # created before a crash: fine
    executor.apply(same_group, JOB, rendered(decision, JOB, job_spec(JOB)))
    assert same_group.calls[-1] == ("patch_status", "attemptStarted")


def test_the_spec_configmap_follows_spec_changes_at_the_next_group():
    fake = FakeKube({("ConfigMap", "j-spec"): child("ConfigMap", "j-spec", data=OLD_SPEC)})
    decision = Decision(ensure_children=True, create_pods=[0], create_attempt=1)
    executor.apply(fake, JOB, rendered(decision, JOB, job_spec(JOB)))
    i = fake.calls.index(("create", "ConfigMap/j-spec"))
    assert fake.calls[i + 1 : i + 3] == [
        ("delete", "ConfigMap/j-spec"),
        ("create", "ConfigMap/j-spec"),
    ]


def test_the_progress_configmap_is_emptied_before_each_pod_group():
    """The last group's record (its resumedFromStep, say) must not be read as the new
    group's: a map that holds one is replaced by an empty one before the pods exist."""

    fake = FakeKube(
        {("ConfigMap", n): child("ConfigMap", n, data=OLD_SPEC) for n in ("j-spec", "j-progress")}
    )
    decision = Decision(ensure_children=True, create_pods=[0], create_attempt=1)
    executor.apply(fake, JOB, rendered(decision, JOB, job_spec(JOB)))
    i = fake.calls.index(("create", "ConfigMap/j-progress"))
    assert fake.calls[i + 1 : i + 3] == [
        ("delete", "ConfigMap/j-progress"),
        ("create", "ConfigMap/j-progress"),
    ]
    assert fake.calls.index(("create", "Pod/j-worker-0")) > i + 2


def test_a_trainer_role_from_an_older_operator_gets_the_current_rule():
    """A job created before the progress ConfigMap existed has a Role on its status;
    before its next pod group it is replaced by the current one (and an up-to-date
    Role is left alone)."""
    old_rule = [{"apiGroups": ["tuneop.io"], "resources": ["tuningjobs/status"],
                 "resourceNames": ["j"], "verbs": ["get", "patch"]}]  # fmt: skip

    def role_exists(rules: list[Obj]) -> FakeKube:
        return FakeKube({("Role", "j-trainer"): child("Role", "j-trainer", rules=rules)})

    decision = Decision(ensure_children=True, create_pods=[0], create_attempt=1)
    fake = role_exists(old_rule)
    executor.apply(fake, JOB, rendered(decision, JOB, job_spec(JOB)))
    i = fake.calls.index(("create", "Role/j-trainer"))
    assert fake.calls[i + 1 : i + 3] == [("delete", "Role/j-trainer"), ("create", "Role/j-trainer")]
    assert fake.calls.index(("create", "Pod/j-worker-0")) > i + 2
    current = role_exists(children.build_role(JOB)["rules"])
    executor.apply(current, JOB, rendered(decision, JOB, job_spec(JOB)))
    assert ("delete", "Role/j-trainer") not in current.calls


@pytest.mark.parametrize("present", [False, True])
def test_the_read_phase_fetches_the_script_configmap_before_deciding(present: bool):
    job = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"image": "img", "script": {"configMap": {"name": "my-search"}}},
    }
    script = {("ConfigMap", "my-search"): {"data": {"search.py": ""}}}
    fake = FakeKube(script if present else {}, job=job)
    Runtime(Config.from_env({}), fake).reconcile_once("ns", "j", logging.getLogger("test"))
    assert fake.calls[:2] == [("get", "ConfigMap/j-progress"), ("get", "ConfigMap/my-search")]
    created = [what for call, what in fake.calls if call == "create"]
    if present:
        assert "Pod/j-worker-0" in created
    else:
        assert created == [] and ("event", "ScriptConfigMapMissing") in fake.calls
    spec_mode = FakeKube(job={**job, "spec": {"image": "img", "hypermodel": "m:H"}})
    Runtime(Config.from_env({}), spec_mode).reconcile_once("ns", "j", logging.getLogger("test"))
    assert [c for c in spec_mode.calls if c[0] == "get"] == [("get", "ConfigMap/j-progress")]


def test_pods_get_the_out_of_memory_trials_of_the_status_the_decision_writes() -> None:
    job = {**JOB, "status": {"oomTrials": ["3"]}}
    decision = Decision(create_pods=[0, 1], create_attempt=2, status={"oomTrials": ["3", "5"]})
    fake = FakeKube()
    executor.apply(fake, job, rendered(decision, job, job_spec(job)))
    created = fake.of_kind("Pod")
    for pod in created:
        env = {v["name"]: v.get("value") for v in pod["spec"]["containers"][0]["env"]}
        assert env["TUNEOP_FAILED_TRIALS"] == "3:OOMKilled,5:OOMKilled"
    assert len(created) == 2
    fake = FakeKube()
    executor.apply(fake, JOB, rendered(Decision(create_pods=[0]), JOB, job_spec(JOB)))
    created = fake.of_kind("Pod")
    env = [v["name"] for v in created[0]["spec"]["containers"][0]["env"]]
    assert "TUNEOP_FAILED_TRIALS" not in env
