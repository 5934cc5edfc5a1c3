"""The pure builders: names, labels, owner references, pod security, GPUs, volumes,
TF_CONFIG, the trainer's least-privilege Role."""

from __future__ import annotations

import datetime as dt
import json

import tuneop_contract as contract
import yaml
from tuneop.api import names
from tuneop.render import children, trainer_pods
from tuneop_contract.spec import JobSpec

JOB = {
    "apiVersion": names.API_VERSION,
    "kind": names.KIND,
    "metadata": {"name": "emg", "namespace": "ml", "uid": "u-1", "generation": 1},
    "spec": {
        "image": "tuneop/trainer:0.1.0",
        "hypermodel": "tuneop_trainer.examples.emg:CNNHyperModel",
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
        "env": [{"name": "EXTRA", "value": "1"}],
        "tolerations": [{"key": "spot", "operator": "Exists"}],
        "priorityClassName": "low",
        "nodeSelector": {"pool": "gpu"},
    },
}


def spec_with(**changes) -> JobSpec:
    return JobSpec.from_dict({**JOB["spec"], **changes})


def env_of(pod) -> dict:
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}


def test_pod_contract_security_and_gpus():
    pod = trainer_pods.build_pod(JOB, spec_with(), 0, 3)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "emg-worker-0" and meta["namespace"] == "ml"
    assert meta["labels"][names.LABEL_JOB] == "emg"
    assert meta["labels"][names.LABEL_ATTEMPT] == "3"
    assert meta["labels"][names.LABEL_MANAGED_BY] == "tuneop"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "tuneop.io/v1alpha1",
            "kind": "TuningJob",
            "name": "emg",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    (container,) = spec["containers"]
    assert container["command"] == [
        "python", "-m", "tuneop_trainer", "run",
        "--spec", "/etc/tuneop/spec.yaml", "--dir", "/checkpoints",
    ]  # fmt: skip
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"memory": "4Gi", "nvidia.com/gpu": 1},
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert {"key": "spot", "operator": "Exists"} in spec["tolerations"]
    # restricted pod security profile + fsGroup for the volume
    psc = spec["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["fsGroup"] == psc["runAsUser"] != 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    csc = container["securityContext"]
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"] == {"drop": ["ALL"]}
    assert spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 60
    assert spec["serviceAccountName"] == "emg-trainer"
    assert spec["priorityClassName"] == "low" and spec["nodeSelector"] == {"pool": "gpu"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"checkpoints": "/checkpoints", "spec": "/etc/tuneop", "dshm": "/dev/shm"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "emg-ckpt"}
    assert volumes["spec"]["configMap"] == {"name": "emg-spec"}
    env = env_of(pod)
    assert env[contract.ENV_JOB_NAME]["value"] == "emg"
    assert env[contract.ENV_JOB_NAMESPACE]["value"] == "ml"
    # the job's own uid (not the pod's): what the trainer records on the volume
    assert env[contract.ENV_JOB_UID]["value"] == "u-1"
    assert env[contract.ENV_PROGRESS_CONFIGMAP]["value"] == "emg-progress"
    assert env[contract.ENV_POD_NAME]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # every address of the pod: its IP (Prometheus) and loopback (kubectl port-forward)
    assert contract.ENV_METRICS_ADDRESS not in env
    assert env[contract.ENV_METRICS_PORT]["value"] == str(contract.DEFAULT_METRICS_PORT)
    assert env[contract.ENV_PROGRESS_INTERVAL]["value"] == "60"  # the default, stall 900 s
    assert env["EXTRA"]["value"] == "1"
    assert contract.ENV_TF_CONFIG not in env
    assert "subdomain" not in spec


def test_cpu_only_pod_has_no_gpu_limit_and_grace_period_follows_spec():
    spec = spec_with(
        distribution={"gpusPerWorker": 0}, terminationGracePeriodSeconds=120, resources={}
    )
    pod = trainer_pods.build_pod(JOB, spec, 0, 0)
    assert pod["spec"]["containers"][0]["resources"] == {}
    assert pod["spec"]["terminationGracePeriodSeconds"] == 120


def test_multi_worker_pods_get_tf_config_and_the_headless_service():
    spec = spec_with(distribution={"strategy": "Auto", "workers": 3, "gpusPerWorker": 2})
    pods = [trainer_pods.build_pod(JOB, spec, i, 0) for i in range(3)]
    hosts = [f"emg-worker-{i}.emg-workers.ml.svc:{names.TF_WORKER_PORT}" for i in range(3)]
    for i, pod in enumerate(pods):
        tf_config = json.loads(env_of(pod)[contract.ENV_TF_CONFIG]["value"])
        assert tf_config == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
        assert pod["spec"]["hostname"] == f"emg-worker-{i}"
        assert pod["spec"]["subdomain"] == "emg-workers"
        assert env_of(pod)[contract.ENV_WORKER_INDEX]["value"] == str(i)
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    service = children.build_service(JOB)
    assert service["metadata"]["name"] == "emg-workers"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {names.LABEL_JOB: "emg"}
    kinds = [c["kind"] for c in children.build_children(JOB, spec)]
    assert kinds == [
        "PersistentVolumeClaim", "ConfigMap", "ConfigMap", "ServiceAccount", "Role", "RoleBinding",
        "Service",
    ]  # fmt: skip
    assert "Service" not in [c["kind"] for c in children.build_children(JOB, spec_with())]


def test_pvc_retained_by_default_owned_with_delete_absent_with_existing_claim():
    retained = children.build_pvc(JOB, spec_with())
    assert retained is not None
    assert retained["metadata"]["name"] == "emg-ckpt"
    assert "ownerReferences" not in retained["metadata"]
    assert retained["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    deleted = children.build_pvc(
        JOB,
        spec_with(checkpoint={"reclaimPolicy": "Delete", "size": "5Gi", "storageClassName": "f"}),
    )
    assert deleted is not None
    assert deleted["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert deleted["spec"]["storageClassName"] == "f"
    assert deleted["spec"]["resources"]["requests"]["storage"] == "5Gi"
    existing = spec_with(checkpoint={"existingClaim": "mine"})
    assert children.build_pvc(JOB, existing) is None
    pod = trainer_pods.build_pod(JOB, existing, 0, 0)
    claims = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims[0]["persistentVolumeClaim"]["claimName"] == "mine"


def test_configmap_holds_the_spec_the_trainer_reads():
    cm = children.build_configmap(JOB, spec_with())
    assert cm["metadata"]["name"] == "emg-spec"
    assert yaml.safe_load(cm["data"]["spec.yaml"]) == JOB["spec"]


def test_trainer_rbac_is_least_privilege():
    role = children.build_role(JOB)
    assert role["rules"] == [  # its progress ConfigMap; nothing of the TuningJob
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["emg-progress"],
            "verbs": ["get", "patch"],
        }
    ]
    progress = children.build_progress_configmap(JOB)
    assert progress["metadata"]["name"] == "emg-progress" and progress["data"] == {}
    assert progress["metadata"]["ownerReferences"][0]["uid"] == JOB["metadata"]["uid"]
    binding = children.build_role_binding(JOB)
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "emg-trainer"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "emg-trainer", "namespace": "ml"}
    ]
    assert children.build_service_account(JOB)["metadata"]["name"] == "emg-trainer"


def script_spec(**script) -> JobSpec:
    spec = {k: v for k, v in JOB["spec"].items() if k != "hypermodel"}
    return JobSpec.from_dict({**spec, "script": script})


def test_script_configmap_is_mounted_read_only_on_every_pod():
    spec = script_spec(configMap={"name": "my-search", "key": "search.py"}, args=["-v"])
    multi = JobSpec.from_dict({**spec.raw, "distribution": {"workers": 3}})
    for job_spec, workers in ((spec, 1), (multi, 3)):
        for i in range(workers):
            pod = trainer_pods.build_pod(JOB, job_spec, i, 0)
            (container,) = pod["spec"]["containers"]
            mounts = {m["name"]: m for m in container["volumeMounts"]}
            assert mounts[names.SCRIPT_VOLUME] == {
                "name": names.SCRIPT_VOLUME,
                "mountPath": contract.SCRIPT_DIR,
                "readOnly": True,
            }
            volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
            assert volumes[names.SCRIPT_VOLUME] == {
                "name": names.SCRIPT_VOLUME,
                "configMap": {"name": "my-search"},
            }
            # same command as spec mode: the trainer reads spec.script from the spec file
            assert container["command"][-4:] == [
                "--spec", contract.DEFAULT_SPEC_FILE, "--dir", contract.DEFAULT_CHECKPOINT_DIR,
            ]  # fmt: skip
    spec_file = yaml.safe_load(children.build_configmap(JOB, spec)["data"]["spec.yaml"])
    assert spec_file["script"] == {"configMap": {"name": "my-search", "key": "search.py"},
                                   "args": ["-v"]}  # fmt: skip


def test_no_script_volume_in_spec_mode_or_with_a_script_path():
    for spec in (spec_with(), script_spec(path="/checkpoints/code/search.py")):
        pod = trainer_pods.build_pod(JOB, spec, 0, 0)
        assert names.SCRIPT_VOLUME not in {v["name"] for v in pod["spec"]["volumes"]}
        mounts = pod["spec"]["containers"][0]["volumeMounts"]
        assert {m["mountPath"] for m in mounts} - {"/dev/shm"} == {"/checkpoints", "/etc/tuneop"}


def test_a_script_runs_in_its_outputs_directory_on_the_claim_unless_the_template_says():
    workdir = f"{contract.DEFAULT_CHECKPOINT_DIR}/{contract.OUTPUTS_DIR}"
    script = script_spec(configMap={"name": "my-search"})
    pod = trainer_pods.build_pod(JOB, script, 0, 0)
    assert env_of(pod)[contract.ENV_SCRIPT_WORKDIR] == {
        "name": contract.ENV_SCRIPT_WORKDIR,
        "value": workdir,
    }
    trainer = {"name": names.TRAINER_CONTAINER, "workingDir": "/data"}
    own = JobSpec.from_dict({**script.raw, "template": {"spec": {"containers": [trainer]}}})
    for spec in (spec_with(), own):
        assert contract.ENV_SCRIPT_WORKDIR not in env_of(trainer_pods.build_pod(JOB, spec, 0, 0))


def test_gpu_pods_get_an_in_memory_dev_shm_of_the_configured_size():
    def shm(dist: dict) -> tuple[dict | None, dict | None]:
        spec = JobSpec.from_dict({**JOB["spec"], "distribution": dist})
        pod = trainer_pods.build_pod(JOB, spec, 0, 0)
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
        return volumes.get(names.SHM_VOLUME), mounts.get(names.SHM_VOLUME)

    volume, mount = shm({"gpusPerWorker": 2})
    assert volume == {
        "name": names.SHM_VOLUME,
        "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"},
    }
    assert mount == {"name": names.SHM_VOLUME, "mountPath": "/dev/shm"}
    volume, _ = shm({"gpusPerWorker": 1, "shmSize": "8Gi"})
    assert volume is not None and volume["emptyDir"]["sizeLimit"] == "8Gi"
    assert shm({"gpusPerWorker": 0}) == (None, None)  # CPU pods keep the runtime's
    assert shm({"gpusPerWorker": 1, "shmSize": "0"}) == (None, None)


def test_trainer_env_carries_the_jobs_mtbf_at_each_creation():
    now = dt.datetime(2026, 1, 1, 6, 0, tzinfo=dt.UTC)
    prior = contract.MTBF_PRIOR_SECONDS

    def mtbf(status: dict, spec: JobSpec | None = None) -> float:
        pod = trainer_pods.build_pod({**JOB, "status": status}, spec or spec_with(), 0, 0, now=now)
        return float(env_of(pod)[contract.ENV_MTBF_SECONDS]["value"])

    assert mtbf({}) == prior  # not started: the prior
    started = {"startTime": "2026-01-01T04:00:00Z"}  # two hours ago
    assert mtbf(started) == prior + 2 * 3600  # no disruption yet
    # the pod recreated after three losses gets the rate they show
    assert mtbf({**started, "preemptions": 3}) == round((prior + 2 * 3600) / 4)
    # each of 2 trial groups runs (and can be lost) for the whole time
    parallel = spec_with(parallelTrials=2, checkpoint={"accessModes": ["ReadWriteMany"]})
    assert mtbf({**started, "preemptions": 3}, parallel) == round((prior + 4 * 3600) / 4)
    assert mtbf({**started, "preemptions": "many"}) == prior + 2 * 3600  # forged: none


def test_the_progress_interval_is_the_operators_unless_the_stall_timeout_is_short():
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"},
           "spec": {"image": "img", "hypermodel": "m:H"}}  # fmt: skip

    def interval(configured: float, **spec: object) -> str:
        parsed = JobSpec.from_dict({**job["spec"], **spec})
        pod = trainer_pods.build_pod(job, parsed, 0, 0, progress_interval=configured)
        return str(env_of(pod)[contract.ENV_PROGRESS_INTERVAL]["value"])

    assert interval(60) == "60" and interval(5) == "5"
    # a progressing job must never look stalled for a report not yet sent
    assert interval(60, stallTimeoutSeconds=30) == "7.5"
