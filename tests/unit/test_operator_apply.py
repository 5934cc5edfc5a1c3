"""The order in which tuneop.executor.apply carries out a Decision (what makes a crash at
any instant safe): children, pods, status, deletions, events, job deletion.
`RecordingKube` is a FAKE of the API layer that only records calls: the ordering is the
property under test; the real API calls are exercised by tests/e2e."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from tuneop import builders, executor, kube, names
from tuneop.config import Config
from tuneop.reconcile import Decision, Event, PodRef
from tuneop.runtime import Runtime

JOB = {
    "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
    "spec": {"image": "img", "hypermodel": "m:H", "distribution": {"workers": 2}},
}


class RecordingKube(kube.Kube):
    """FAKE: records calls instead of talking to an API server."""

    def __init__(
        self, existing_pod_attempt: str | None = None, existing: dict[str, Any] | None = None
    ) -> None:
        self.calls: list[tuple[str, str]] = []
        self.existing_pod_attempt = existing_pod_attempt
        self.existing = existing or {}

    def create(self, obj: dict[str, Any]) -> bool:
        self.calls.append(("create", f"{obj['kind']}/{obj['metadata']['name']}"))
        if obj["kind"] in self.existing:
            self.existing.pop(obj["kind"])
            return False
        return not (obj["kind"] == "Pod" and self.existing_pod_attempt is not None)

    def get(self, path: str) -> dict[str, Any] | None:
        owned = {"uid": "child-uid", "ownerReferences": [builders.owner_reference(JOB)]}
        if "/configmaps/" in path:
            return {"metadata": owned, "data": {"spec.yaml": "old: spec\n"}}
        labels = {names.LABEL_ATTEMPT: self.existing_pod_attempt}
        return {"metadata": {**owned, "labels": labels}}

    def patch_status(
        self,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        resource_version: str | None = None,
    ) -> None:
        self.calls.append(("patch_status", ",".join(sorted(status))))

    def delete(
        self, kind: str, namespace: str, name: str, *, uid: str | None = None, **options: Any
    ) -> bool:
        self.calls.append(("delete", f"{kind}/{name}"))
        return True

    def post_event(self, job: dict[str, Any], event: Event) -> None:
        self.calls.append(("event", event.reason))


def test_apply_order_create_then_status_then_delete_then_events():
    fake = RecordingKube()
    decision = Decision(
        status={"attempt": 1, "attemptStarted": True},
        events=[Event("Normal", "Created", "x")],
        ensure_children=True,
        create_pods=[0, 1],
        create_attempt=1,
        delete_pods=[PodRef("old", "uid-old")],
        delete_job=True,
    )
    executor.apply(fake, JOB, decision, metrics_port=9464, uid=1000)
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


def test_a_pod_of_an_older_group_blocks_the_status_patch():
    fake = RecordingKube(existing_pod_attempt="0")
    decision = Decision(status={"attemptStarted": True}, create_pods=[0], create_attempt=1)
    with pytest.raises(executor.StaleGroup):
        executor.apply(fake, JOB, decision, metrics_port=9464, uid=1000)
    assert ("patch_status", "attemptStarted") not in fake.calls
    same_group = RecordingKube(existing_pod_attempt="1")  # created before a crash: fine
    executor.apply(same_group, JOB, decision, metrics_port=9464, uid=1000)
    assert same_group.calls[-1] == ("patch_status", "attemptStarted")


def test_the_spec_configmap_follows_spec_changes_at_the_next_group():
    fake = RecordingKube(existing={"ConfigMap": True})
    decision = Decision(ensure_children=True, create_pods=[0], create_attempt=1)
    executor.apply(fake, JOB, decision, metrics_port=9464, uid=1000)
    i = fake.calls.index(("create", "ConfigMap/j-spec"))
    assert fake.calls[i + 1 : i + 3] == [
        ("delete", "ConfigMap/j-spec"),
        ("create", "ConfigMap/j-spec"),
    ]


def test_the_progress_configmap_is_emptied_before_each_pod_group():
    """The last group's record (its resumedFromStep, say) must not be read as the new
    group's: a map that holds one is replaced by an empty one before the pods exist."""

    class ConfigMapsExist(RecordingKube):
        def create(self, obj: dict[str, Any]) -> bool:
            return super().create(obj) and obj["kind"] != "ConfigMap"

    fake = ConfigMapsExist()
    decision = Decision(ensure_children=True, create_pods=[0], create_attempt=1)
    executor.apply(fake, JOB, decision, metrics_port=9464, uid=1000)
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

    class RoleExists(RecordingKube):
        rules = old_rule

        def create(self, obj: dict[str, Any]) -> bool:
            return super().create(obj) and obj["kind"] != "Role"

        def get(self, path: str) -> dict[str, Any] | None:
            if "/roles/" in path:
                owned = {"uid": "r1", "ownerReferences": [builders.owner_reference(JOB)]}
                return {"metadata": owned, "rules": self.rules}
            return super().get(path)

    decision = Decision(ensure_children=True, create_pods=[0], create_attempt=1)
    fake = RoleExists()
    executor.apply(fake, JOB, decision, metrics_port=9464, uid=1000)
    i = fake.calls.index(("create", "Role/j-trainer"))
    assert fake.calls[i + 1 : i + 3] == [("delete", "Role/j-trainer"), ("create", "Role/j-trainer")]
    assert fake.calls.index(("create", "Pod/j-worker-0")) > i + 2
    current = RoleExists()
    current.rules = builders.build_role(JOB)["rules"]
    executor.apply(current, JOB, decision, metrics_port=9464, uid=1000)
    assert ("delete", "Role/j-trainer") not in current.calls


class ReadingKube(RecordingKube):
    """FAKE: also serves the reads of Runtime.reconcile_once (job, pods, ConfigMap)."""

    def __init__(self, job: dict[str, Any], configmaps: dict[str, Any]) -> None:
        super().__init__()
        self.job = job
        self.configmaps = configmaps

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.job

    def list_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return []

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", f"ConfigMap/{name}"))
        return self.configmaps.get(name)


@pytest.mark.parametrize("present", [False, True])
def test_the_read_phase_fetches_the_script_configmap_before_deciding(present: bool):
    job = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"image": "img", "script": {"configMap": {"name": "my-search"}}},
    }
    fake = ReadingKube(job, {"my-search": {"data": {"search.py": ""}}} if present else {})
    Runtime(Config.from_env({}), fake).reconcile_once("ns", "j", logging.getLogger("test"))
    assert fake.calls[:2] == [("get", "ConfigMap/j-progress"), ("get", "ConfigMap/my-search")]
    created = [what for call, what in fake.calls if call == "create"]
    if present:
        assert "Pod/j-worker-0" in created
    else:
        assert created == [] and ("event", "ScriptConfigMapMissing") in fake.calls
    spec_mode = ReadingKube({**job, "spec": {"image": "img", "hypermodel": "m:H"}}, {})
    Runtime(Config.from_env({}), spec_mode).reconcile_once("ns", "j", logging.getLogger("test"))
    assert [c for c in spec_mode.calls if c[0] == "get"] == [("get", "ConfigMap/j-progress")]


def test_pods_get_the_out_of_memory_trials_of_the_status_the_decision_writes() -> None:
    created: list[dict[str, Any]] = []

    class Capturing(RecordingKube):
        def create(self, obj: dict[str, Any]) -> bool:
            if obj["kind"] == "Pod":
                created.append(obj)
            return super().create(obj)

    job = {**JOB, "status": {"oomTrials": ["3"]}}
    decision = Decision(create_pods=[0, 1], create_attempt=2, status={"oomTrials": ["3", "5"]})
    executor.apply(Capturing(), job, decision, metrics_port=9464, uid=1000)
    for pod in created:
        env = {v["name"]: v.get("value") for v in pod["spec"]["containers"][0]["env"]}
        assert env["TUNEOP_FAILED_TRIALS"] == "3:OOMKilled,5:OOMKilled"
    assert len(created) == 2
    created.clear()
    executor.apply(Capturing(), JOB, Decision(create_pods=[0]), metrics_port=9464, uid=1000)
    env = [v["name"] for v in created[0]["spec"]["containers"][0]["env"]]
    assert "TUNEOP_FAILED_TRIALS" not in env
