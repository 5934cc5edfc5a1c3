"""spec.template (tuneop.api.podtemplate, tuneop.render.overlay): every owned field
refused with its message, the restricted Pod Security checks, the merge over the
operator's pod, the GPU-only parts, spec.distribution.gpuResource, and the cluster-wide
trainer defaults with their precedence, from the env variables to the pod."""

from __future__ import annotations

import copy
import datetime as dt
import logging
import re
from typing import Any

import pytest
import yaml
from tuneop.api import names, podtemplate
from tuneop.api.podtemplate import Defaults
from tuneop.api.spec import validate
from tuneop.decide.reconcile import decide
from tuneop.render import overlay, trainer_pods
from tuneop.run.config import Config, ConfigError
from tuneop.run.runtime import Runtime
from tuneop_contract.spec import JobSpec

from tests.unit.crd_schema import ROOT, check, schema
from tests.unit.fakes import FakeKube
from tests.unit.operator_world import observed

JOB: dict[str, Any] = {
    "apiVersion": names.API_VERSION,
    "kind": names.KIND,
    "metadata": {"name": "emg", "namespace": "ml", "uid": "u-1", "generation": 1},
    "spec": {"image": "tuneop/trainer:0.1.0", "hypermodel": "m:H"},
}
DATA = {
    "metadata": {"labels": {"team": "vision"}, "annotations": {"example.com/owner": "alice"}},
    "spec": {
        "imagePullSecrets": [{"name": "registry"}],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "ds", "readOnly": True}}
        ],
        "containers": [
            {
                "name": "trainer",
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                "envFrom": [{"secretRef": {"name": "s3"}}],
            }
        ],
        "securityContext": {"runAsUser": 1000660000, "runAsGroup": 1000660000, "fsGroup": 5},
        "initContainers": [{"name": "fetch", "image": "busybox", "command": ["true"]}],
        "runtimeClassName": "nvidia",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
        "schedulerName": "volcano",
    },
}


def errors(template: Any) -> list[str]:
    return [f"{field}: {message}" for field, message in podtemplate.check(template)]


def pod_of(template: Any = None, **spec: Any) -> dict[str, Any]:
    job_spec = {**JOB["spec"], **spec}
    if template is not None:
        job_spec["template"] = template
    return trainer_pods.build_pod(JOB, JobSpec.from_dict(job_spec), 0, 0)


def test_a_data_set_template_is_valid():
    assert errors(DATA) == []
    assert errors(None) == [] and errors({}) == [] and errors({"spec": {}}) == []


@pytest.mark.parametrize(("key", "message"), sorted(podtemplate.OWNED_SPEC.items()))
def test_every_owned_pod_field_is_refused_naming_it(key: str, message: str):
    assert errors({"spec": {key: "x"}}) == [f"spec.template.spec.{key}: {message}"]


@pytest.mark.parametrize(("key", "message"), sorted(podtemplate.OWNED_CONTAINER.items()))
def test_every_owned_trainer_container_field_is_refused_naming_it(key: str, message: str):
    template = {"spec": {"containers": [{"name": "trainer", key: "x"}]}}
    assert errors(template) == [f"spec.template.spec.containers[0].{key}: {message}"]


def test_host_namespaces_may_be_spelled_out_as_false():
    assert errors({"spec": {"hostNetwork": False, "hostPID": False, "hostIPC": False}}) == []


def test_the_owned_field_messages_point_to_the_field_to_use():
    assert podtemplate.OWNED_SPEC["tolerations"] == "set spec.tolerations instead"
    assert (
        "spec.terminationGracePeriodSeconds"
        in podtemplate.OWNED_SPEC["terminationGracePeriodSeconds"]
    )
    assert "Never" in podtemplate.OWNED_SPEC["restartPolicy"]
    assert "spec.env" in podtemplate.OWNED_CONTAINER["env"]
    assert "spec.script" in podtemplate.OWNED_CONTAINER["command"]


@pytest.mark.parametrize("label", sorted(podtemplate.OPERATOR_LABELS))
def test_the_operators_labels_are_reserved(label: str):
    assert errors({"metadata": {"labels": {label: "x"}}}) == [
        f"spec.template.metadata.labels.{label}: reserved for the operator's own labels"
    ]


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (
            {"metadata": {"annotations": {"tuneop.io/anything": "x"}}},
            "spec.template.metadata.annotations.tuneop.io/anything: reserved",
        ),
        ({"metadata": {"name": "x"}}, "spec.template.metadata.name: set by the operator"),
        ({"metadata": {"labels": {"a": 1}}}, "spec.template.metadata.labels.a: must be a string"),
        ({"kind": "Pod"}, "spec.template.kind: unknown field"),
        ({"spec": {"sysctls": []}}, "spec.template.spec.sysctls: not supported"),
        ({"spec": []}, "spec.template.spec: must be an object"),
        ([], "spec.template: must be an object"),
    ],
)
def test_template_shape_errors(template: Any, expected: str):
    (error,) = errors(template)
    assert error.startswith(expected), error


@pytest.mark.parametrize("name", sorted(podtemplate.OWNED_VOLUMES))
def test_the_operators_volume_names_are_reserved(name: str):
    assert errors({"spec": {"volumes": [{"name": name, "emptyDir": {}}]}}) == [
        f"spec.template.spec.volumes[0].name: {name!r} is the operator's volume (reserved)"
    ]


@pytest.mark.parametrize("kind", ["hostPath", "nfs", "iscsi", "gitRepo", "rbd"])
def test_volume_types_outside_the_restricted_profile_are_refused(kind: str):
    (error,) = errors({"spec": {"volumes": [{"name": "v", kind: {}}]}})
    assert error.startswith(
        f"spec.template.spec.volumes[0].{kind}: volume type not allowed by the restricted"
    )


def test_volume_lists_are_merged_by_name_so_names_are_unique_and_have_one_source():
    twice = {"spec": {"volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]}}
    assert errors(twice) == ["spec.template.spec.volumes[1].name: 'v' appears twice"]
    both = {"spec": {"volumes": [{"name": "v", "emptyDir": {}, "secret": {}}]}}
    assert errors(both) == ["spec.template.spec.volumes[0]: must have exactly one volume source"]
    nameless = {"spec": {"volumes": [{"emptyDir": {}}]}}
    assert errors(nameless)[0] == "spec.template.spec.volumes[0].name: required"


@pytest.mark.parametrize(
    ("path", "clash"),
    [
        ("/checkpoints", "/checkpoints"),
        ("/checkpoints/data", "/checkpoints"),
        ("/etc/tuneop", "/etc/tuneop"),
        ("/etc", "/etc/tuneop"),
        ("/", "/checkpoints"),
        ("/dev/shm/", "/dev/shm"),
        ("/etc/tuneop-script/x", "/etc/tuneop-script"),
    ],
)
def test_mounts_may_not_overlap_the_operators(path: str, clash: str):
    template = {
        "spec": {
            "volumes": [{"name": "v", "emptyDir": {}}],
            "containers": [{"name": "trainer", "volumeMounts": [{"name": "v", "mountPath": path}]}],
        }
    }
    assert errors(template) == [
        f"spec.template.spec.containers[0].volumeMounts[0].mountPath: {path} overlaps the "
        f"operator's mount {clash}"
    ]


def test_mounts_name_a_template_volume_and_a_tuneop_prefix_is_reserved():
    template = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "volumeMounts": [{"name": "checkpoints", "mountPath": "/ckpt"}],
                    "envFrom": [{"configMapRef": {"name": "c"}, "prefix": "TUNEOP_X"}],
                }
            ]
        }
    }
    assert errors(template) == [
        "spec.template.spec.containers[0].envFrom[0].prefix: "
        "TUNEOP_ is reserved (set by the operator)",
        "spec.template.spec.containers[0].volumeMounts[0].name: 'checkpoints' is not a volume "
        "of spec.template.spec.volumes",
    ]


def test_only_the_trainer_container_can_be_given():
    (error,) = errors({"spec": {"containers": [{"name": "sidecar", "image": "x"}]}})
    assert error == (
        "spec.template.spec.containers[0].name: only the 'trainer' container can be given "
        "(extra containers: initContainers)"
    )
    (error,) = errors({"spec": {"containers": [{"name": "trainer", "livenessProbe": {}}]}})
    assert error.startswith("spec.template.spec.containers[0].livenessProbe: not supported")


def test_init_containers():
    init = {"name": "fetch", "image": "busybox", "volumeMounts": [{"name": "checkpoints"}]}
    assert errors({"spec": {"initContainers": [init]}}) == []  # may mount the operator's
    # the script and shm volumes exist only in some pods: a mount of them could not be created
    (error,) = errors({"spec": {"initContainers": [{**init, "volumeMounts": [{"name": "dshm"}]}]}})
    assert error.startswith("spec.template.spec.initContainers[0].volumeMounts[0].name: 'dshm'")
    bad = [
        {"name": "trainer", "image": "x"},
        {"name": "side", "image": "x", "restartPolicy": "Always"},
        {"name": "noimage", "volumeMounts": [{"name": "nope"}]},
    ]
    assert errors({"spec": {"initContainers": bad}}) == [
        "spec.template.spec.initContainers[0].name: 'trainer' is the trainer container",
        "spec.template.spec.initContainers[1].restartPolicy: sidecar containers are not supported",
        "spec.template.spec.initContainers[2].image: required",
        "spec.template.spec.initContainers[2].volumeMounts[0].name: "
        "'nope' is not a volume of spec.template.spec.volumes nor checkpoints or spec",
    ]


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ({"runAsUser": 0}, "runAsUser: must be an integer >= 1 (not root)"),
        ({"runAsNonRoot": False}, "runAsNonRoot: must be true"),
        ({"runAsGroup": "x"}, "runAsGroup: must be an integer >= 1"),
        ({"seccompProfile": {"type": "Unconfined"}}, "seccompProfile.type: must be RuntimeDefault"),
        (
            {"appArmorProfile": {"type": "Unconfined"}},
            "appArmorProfile.type: must be RuntimeDefault",
        ),
        ({"seLinuxOptions": {"user": "root"}}, "seLinuxOptions: user and role must not be set"),
        ({"seLinuxOptions": {"type": "spc_t"}}, "seLinuxOptions.type: must be one of container_t"),
        ({"fsGroup": 0}, "fsGroup: must be an integer >= 1"),
        ({"supplementalGroups": [0]}, "supplementalGroups: must be a list of integers >= 1"),
        ({"sysctls": []}, "sysctls: not supported"),
        ({"windowsOptions": {}}, "windowsOptions: not supported"),
    ],
)
def test_the_pod_security_context_stays_restricted(context: dict[str, Any], expected: str):
    (error,) = errors({"spec": {"securityContext": context}})
    assert error.startswith(f"spec.template.spec.securityContext.{expected}"), error


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ({"privileged": True}, "privileged: not allowed by the restricted"),
        ({"allowPrivilegeEscalation": True}, "allowPrivilegeEscalation: not allowed"),
        ({"capabilities": {"add": ["SYS_ADMIN"]}}, "capabilities.add: SYS_ADMIN not allowed"),
        ({"capabilities": {"drop": ["NET_RAW"]}}, "capabilities.drop: must include ALL"),
        ({"procMount": "Unmasked"}, "procMount: not allowed"),
        ({"runAsUser": 0}, "runAsUser: must be an integer >= 1"),
    ],
)
def test_container_security_contexts_stay_restricted(context: dict[str, Any], expected: str):
    for key in ("containers", "initContainers"):
        container = {"name": "trainer" if key == "containers" else "init", "image": "x"}
        if key == "containers":
            del container["image"]
        (error,) = errors({"spec": {key: [{**container, "securityContext": context}]}})
        assert error.startswith(f"spec.template.spec.{key}[0].securityContext.{expected}"), error
    ok = {"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}, "runAsUser": 7}
    assert errors({"spec": {"containers": [{"name": "trainer", "securityContext": ok}]}}) == []


def test_spec_validate_reports_template_errors_as_spec_errors():
    spec = JobSpec.from_dict({**JOB["spec"], "template": {"spec": {"restartPolicy": "Always"}}})
    assert [str(e) for e in validate(spec)] == [
        "spec.template.spec.restartPolicy: "
        "set by the operator (Never: the operator decides about restarts)"
    ]


def test_an_invalid_template_fails_the_job_with_invalid_spec_and_no_pods():
    job = {**JOB, "spec": {**JOB["spec"], "template": {"spec": {"hostPID": True}}}}
    decision = decide(observed(job, [], now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)))
    assert decision.create_pods == []
    assert decision.status["phase"] == "Failed"
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "spec.template.spec.hostPID: not allowed by the restricted" in failed["message"]
    assert [(e.type, e.reason) for e in decision.events] == [("Warning", "InvalidSpec")]


# --- the overlay --------------------------------------------------------------------


def test_the_overlay_adds_what_the_template_gives_and_keeps_what_the_operator_owns():
    plain = pod_of()
    pod = pod_of(DATA)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"] == {**plain["metadata"]["labels"], "team": "vision"}
    assert meta["annotations"] == {"example.com/owner": "alice"}
    assert meta["name"] == plain["metadata"]["name"]
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["volumes"] == [*plain["spec"]["volumes"], DATA["spec"]["volumes"][0]]
    (trainer,) = spec["containers"]
    (plain_trainer,) = plain["spec"]["containers"]
    assert trainer["volumeMounts"] == [
        *plain_trainer["volumeMounts"],
        {"name": "data", "mountPath": "/data", "readOnly": True},
    ]
    assert trainer["envFrom"] == [{"secretRef": {"name": "s3"}}]
    for key in ("image", "command", "env", "resources", "ports", "securityContext"):
        assert trainer[key] == plain_trainer[key], key
    assert spec["securityContext"] == {
        **plain["spec"]["securityContext"],
        "runAsUser": 1000660000,
        "runAsGroup": 1000660000,
        "fsGroup": 5,
    }
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (init,) = spec["initContainers"]
    assert init["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
    }
    assert spec["runtimeClassName"] == "nvidia" and spec["schedulerName"] == "volcano"
    assert spec["topologySpreadConstraints"] == DATA["spec"]["topologySpreadConstraints"]
    for key in ("restartPolicy", "serviceAccountName", "terminationGracePeriodSeconds"):
        assert spec[key] == plain["spec"][key]


def test_a_pod_without_gpus_gets_everything_but_the_gpu_only_parts():
    pod = pod_of(DATA, distribution={"gpusPerWorker": 0})
    spec = pod["spec"]
    assert "runtimeClassName" not in spec and "topologySpreadConstraints" not in spec
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["securityContext"]["runAsUser"] == 1000660000
    assert pod["metadata"]["labels"]["team"] == "vision"
    assert any(v["name"] == "data" for v in spec["volumes"])


def test_the_overlay_serves_any_trainer_image_pod_by_its_container_name():
    """An oracle pod (no GPU, its own container name) gets the pod-level parts and the
    trainer container's additions on its own container."""
    oracle = {
        "metadata": {"name": "emg-oracle", "labels": {names.LABEL_JOB: "emg"}},
        "spec": {"containers": [{"name": "oracle", "image": "img"}], "volumes": []},
    }
    before = copy.deepcopy(oracle)
    spec = JobSpec.from_dict({**JOB["spec"], "template": DATA})
    out = overlay.apply(oracle, spec, container="oracle")
    assert oracle == before  # not changed in place
    (container,) = out["spec"]["containers"]
    assert container["envFrom"] == [{"secretRef": {"name": "s3"}}]
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/data", "readOnly": True}]
    assert out["metadata"]["labels"] == {names.LABEL_JOB: "emg", "team": "vision"}
    assert "runtimeClassName" not in out["spec"]


def test_the_operators_labels_win_over_a_template_that_was_not_checked():
    pod = overlay.apply(
        {"metadata": {"labels": {names.LABEL_JOB: "emg"}}, "spec": {}},
        JobSpec.from_dict(
            {"template": {"metadata": {"labels": {names.LABEL_JOB: "other", "tuneop.io/x": "1"}}}}
        ),
    )
    assert pod["metadata"]["labels"] == {names.LABEL_JOB: "emg"}


def test_a_template_security_context_can_only_tighten_the_trainer_container():
    template = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"add": ["NET_BIND_SERVICE"]},
                    },
                }
            ]
        }
    }
    (trainer,) = pod_of(template)["spec"]["containers"]
    assert trainer["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
    }


def test_the_gpu_resource_name_is_used_in_the_limit_and_the_toleration():
    pod = pod_of(distribution={"gpusPerWorker": 2, "gpuResource": "amd.com/gpu"})
    (trainer,) = pod["spec"]["containers"]
    assert trainer["resources"]["limits"] == {"amd.com/gpu": 2}
    assert {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"][
        "tolerations"
    ]
    assert overlay.requests_gpus(pod, "amd.com/gpu")
    assert not overlay.requests_gpus(pod, "nvidia.com/gpu")
    spec = JobSpec.from_dict(
        {**JOB["spec"], "distribution": {"gpuResource": "amd.com/gpu"},
         "resources": {"limits": {"amd.com/gpu": 1, "nvidia.com/gpu": 1}}}
    )  # fmt: skip
    assert [str(e) for e in validate(spec)] == [
        "spec.resources.limits.amd.com/gpu: set spec.distribution.gpusPerWorker instead",
        "spec.resources.limits.nvidia.com/gpu: set spec.distribution.gpusPerWorker instead",
    ]


# --- cluster-wide defaults ----------------------------------------------------------

DEFAULTS = Defaults(
    image="registry.example.com/ml/trainer:1",
    image_pull_secrets=("ml-registry",),
    tolerations=({"key": "pool", "operator": "Exists", "effect": "NoSchedule"},),
    priority_class_name="tuning-low",
)


def test_defaults_fill_what_the_job_leaves_unset():
    job = {**JOB, "spec": {"hypermodel": "m:H", "priorityClassName": ""}}
    spec = podtemplate.with_defaults(job, DEFAULTS)["spec"]
    assert spec["image"] == DEFAULTS.image
    assert spec["priorityClassName"] == "tuning-low"
    assert spec["tolerations"] == [dict(DEFAULTS.tolerations[0])]
    assert spec["template"] == {"spec": {"imagePullSecrets": [{"name": "ml-registry"}]}}
    assert "image" not in job["spec"]  # a copy: the job read from the API is not changed


def test_a_jobs_own_value_wins_whole_and_an_empty_list_is_a_value():
    own = {
        "image": "mine",
        "hypermodel": "m:H",
        "priorityClassName": "high",
        "tolerations": [],
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"imagePullSecrets": []}},
    }
    job = {**JOB, "spec": own}
    assert podtemplate.with_defaults(job, DEFAULTS) is job
    partial = {
        **JOB,
        "spec": {"hypermodel": "m:H", "template": {"metadata": {"labels": {"a": "b"}}}},
    }
    template = podtemplate.with_defaults(partial, DEFAULTS)["spec"]["template"]
    assert template == {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"imagePullSecrets": [{"name": "ml-registry"}]},
    }
    assert podtemplate.with_defaults(JOB, Defaults()) is JOB


def test_trainer_defaults_come_from_the_operator_env():
    config = Config.from_env(
        {
            "TUNEOP_OPERATOR_TRAINER_IMAGE": "registry.example.com/ml/trainer:1",
            "TUNEOP_OPERATOR_TRAINER_IMAGE_PULL_SECRETS": " ml-registry , ",
            "TUNEOP_OPERATOR_TRAINER_TOLERATIONS": (
                '[{"key":"pool","operator":"Exists","effect":"NoSchedule"}]'
            ),
            "TUNEOP_OPERATOR_TRAINER_PRIORITY_CLASS_NAME": "tuning-low",
        }
    )
    assert config.trainer_defaults == DEFAULTS
    assert (
        Config.from_env({"TUNEOP_OPERATOR_TRAINER_TOLERATIONS": "[]"}).trainer_defaults
        == Defaults()
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "TRAINER_IMAGE",
            "a b",
            "TUNEOP_OPERATOR_TRAINER_IMAGE='a b': an image reference has no spaces",
        ),
        (
            "TRAINER_IMAGE_PULL_SECRETS",
            "ok,Bad_Name",
            "TRAINER_IMAGE_PULL_SECRETS: 'Bad_Name' is not",
        ),
        ("TRAINER_PRIORITY_CLASS_NAME", "Low!", "TRAINER_PRIORITY_CLASS_NAME: 'Low!' is not"),
        ("TRAINER_TOLERATIONS", "{", "TRAINER_TOLERATIONS: not JSON"),
        ("TRAINER_TOLERATIONS", '{"key": "a"}', "TRAINER_TOLERATIONS: must be a JSON list"),
        ("TRAINER_TOLERATIONS", '[{"keys": "a"}]', "TRAINER_TOLERATIONS: must be a JSON list"),
        ("TRAINER_TOLERATIONS", '[{"operator": "In"}]', "invalid operator or effect"),
    ],
)
def test_invalid_trainer_defaults_stop_the_operator_naming_the_variable(
    name: str, value: str, message: str
):
    with pytest.raises(ConfigError, match=re.escape(message)):
        Config.from_env({f"TUNEOP_OPERATOR_{name}": value})


def test_the_operator_applies_its_defaults_when_it_reads_a_job():
    job = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"hypermodel": "m:H", "priorityClassName": ""},
    }
    env = {
        "TUNEOP_OPERATOR_TRAINER_IMAGE": "registry.example.com/ml/trainer:1",
        "TUNEOP_OPERATOR_TRAINER_IMAGE_PULL_SECRETS": "ml-registry",
        "TUNEOP_OPERATOR_TRAINER_PRIORITY_CLASS_NAME": "tuning-low",
    }
    fake = FakeKube(job=job)
    Runtime(Config.from_env(env), fake).reconcile_once("ns", "j", logging.getLogger("test"))
    (pod,) = fake.of_kind("Pod")
    assert pod["spec"]["containers"][0]["image"] == "registry.example.com/ml/trainer:1"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "ml-registry"}]
    assert pod["spec"]["priorityClassName"] == "tuning-low"
    # without a default, a job without an image is an InvalidSpec naming the chart value
    bare = FakeKube(job=job)
    Runtime(Config.from_env({}), bare).reconcile_once("ns", "j", logging.getLogger("test"))
    assert bare.of_kind("Pod") == [] and ("event", "InvalidSpec") in bare.calls


def test_the_data_set_sample_is_valid_and_its_template_accepted():
    sample = yaml.safe_load((ROOT / "manifests/samples/tuningjob-dataset.yaml").read_text())
    assert check(sample, schema()) == []
    sample = podtemplate.with_defaults(sample, DEFAULTS)  # its image: the operator's default
    spec = JobSpec.from_dict(sample["spec"])
    assert validate(spec) == []
    pod = trainer_pods.build_pod({**JOB, "spec": sample["spec"]}, spec, 0, 0)
    (trainer,) = pod["spec"]["containers"]
    assert {"name": "data", "mountPath": "/data", "readOnly": True} in trainer["volumeMounts"]


def test_a_pod_the_api_server_refuses_is_reported_on_the_job_not_retried_silently():
    from tuneop.decide.refusal import POD_REJECTED

    job = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"image": "img", "hypermodel": "m:H"},
    }
    invalid = (422, 'Pod "j-worker-0" is invalid: spec.volumes[2]: bad')
    fake = FakeKube(job=job, refuse_pods=invalid)
    Runtime(Config.from_env({}), fake).reconcile_once("ns", "j", logging.getLogger("test"))
    (status,) = [str(patch) for patch in fake.patches]
    assert POD_REJECTED in status and "spec.volumes[2]: bad" in status
    assert ("event", POD_REJECTED) in fake.calls


def test_a_parallel_jobs_oracle_pod_gets_the_template_but_not_its_gpu_parts():
    from tuneop.api.groups import pod_groups

    job_spec = {**JOB["spec"], "parallelTrials": 2, "template": DATA,
                "distribution": {"gpuResource": "amd.com/gpu"}}  # fmt: skip
    spec = JobSpec.from_dict(job_spec)
    assert validate(spec) == []
    oracle, trial, _ = pod_groups("emg", spec)
    job = {**JOB, "spec": job_spec}
    pod = trainer_pods.build_pod(job, spec, 0, 0, group=oracle)
    meta, pod_spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "vision" and meta["labels"][names.LABEL_GROUP] == "oracle"
    assert pod_spec["imagePullSecrets"] == [{"name": "registry"}]
    assert pod_spec["securityContext"]["runAsUser"] == 1000660000
    assert any(v["name"] == "data" for v in pod_spec["volumes"])
    assert "runtimeClassName" not in pod_spec and "topologySpreadConstraints" not in pod_spec
    assert pod_spec["hostname"] == names.oracle_pod_name("emg")  # still the operator's
    worker = trainer_pods.build_pod(job, spec, 0, 0, group=trial)
    assert worker["spec"]["runtimeClassName"] == "nvidia"
    assert worker["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu": 1}


def test_a_failed_init_container_is_a_failure_that_names_it():
    from tuneop.decide import classify

    pod = {
        "metadata": {"name": "emg-worker-0", "labels": {}},
        "spec": {"nodeName": "n"},
        "status": {
            "phase": "Failed",
            "initContainerStatuses": [
                {"name": "ok", "state": {"terminated": {"exitCode": 0}}},
                {"name": "fetch", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
            ],
            "containerStatuses": [
                {"name": "trainer", "state": {"waiting": {"reason": "PodInitializing"}}}
            ],
        },
    }
    result = classify.classify(pod, node={"metadata": {"name": "n"}}, node_known=True)
    assert result.outcome == classify.Outcome.FAILED
    assert result.message == "init container fetch exited with code 1: Error"
