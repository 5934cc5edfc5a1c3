"""`spec.template` end to end: a data-set claim mounted read-only and read by the real
trainer, pull secrets, labels, annotations, envFrom, an init container and a UID range on
the pods (in a namespace enforcing the restricted Pod Security level, so the API server
itself judges the overlaid pod), and the fields the operator owns refused: by the CRD's
CEL at the API server, or by the operator (condition Failed/InvalidSpec + Event)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tuneop.api import names
from tuneop_trainer.data import synthetic_emg

from tests.e2e import admission
from tests.e2e.harness import Env, Kubectl, dry_run_rejected, required_condition, sample, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

UID = 1000660000
"""An OpenShift-style project UID (the operator's default is 1000)."""

ONE_TRIAL = {
    "algorithm": "RandomSearch",
    "objective": {"name": "val_accuracy", "direction": "max"},
    "maxTrials": 1,
    "maxEpochs": 1,
    "seed": 7,
    "batchSize": 32,
}

# The init container proves the claim is mounted read-only: it reads the file and
# exits 0 only when a write fails with EROFS.
CHECK_READ_ONLY = """
import errno, sys
open('/data/emg.npz', 'rb').read(16)
try:
    open('/data/written', 'w')
except OSError as err:
    sys.exit(0 if err.errno == errno.EROFS else 3)
sys.exit(4)
"""


def data_claim(e2e: Env, namespace: str, name: str = "emg-data") -> Path:
    """A claim of the local-path StorageClass, bound; returns its volume's directory."""
    e2e.kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )

    def bound() -> str | None:
        pvc = e2e.kubectl.json("get", "pvc", name, "-n", namespace)
        return pvc["spec"].get("volumeName") if pvc["status"].get("phase") == "Bound" else None

    volume = wait_for(bound, 60, f"claim {name} bound")
    pv = e2e.kubectl.json("get", "pv", volume)
    directory = Path(pv["spec"]["local"]["path"])
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def test_a_data_set_claim_is_mounted_read_only_and_read_by_the_trainer(e2e: Env):
    ns = e2e.namespace("template")
    e2e.kubectl("label", "ns", ns, "pod-security.kubernetes.io/enforce=restricted")
    x, y = synthetic_emg(256, seed=3)
    np.savez(data_claim(e2e, ns) / "emg.npz", x=x, y=y)
    e2e.kubectl(
        "create", "secret", "docker-registry", "registry", "-n", ns,
        "--docker-server=registry.example.com", "--docker-username=u", "--docker-password=p",
    )  # fmt: skip
    e2e.kubectl("create", "configmap", "extra-env", "-n", ns, "--from-literal=DATASET=emg")
    template = {
        "metadata": {
            "labels": {"team": "vision", "cost-center": "42"},
            "annotations": {"example.com/owner": "alice"},
        },
        "spec": {
            "imagePullSecrets": [{"name": "registry"}],
            "securityContext": {"runAsUser": UID, "runAsGroup": UID, "fsGroup": UID},
            "volumes": [
                {
                    "name": "data",
                    "persistentVolumeClaim": {"claimName": "emg-data", "readOnly": True},
                }
            ],
            "initContainers": [
                {
                    "name": "check-data",
                    "image": "python:3.12-slim",
                    "command": ["python", "-c", CHECK_READ_ONLY],
                    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                }
            ],
            "containers": [
                {
                    "name": "trainer",
                    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                    "envFrom": [{"configMapRef": {"name": "extra-env"}}],
                }
            ],
        },
    }
    e2e.submit(
        ns,
        data={"path": "/data/emg.npz", "validationSplit": 0.25},
        tuner=ONE_TRIAL,
        distribution={"gpusPerWorker": 0},
        template=template,
    )
    final = e2e.wait_phase(ns, "Succeeded", timeout=300)
    assert final["trialsCompleted"] == 1 and final["failures"] == 0, final
    pod = e2e.kubectl.json("get", "pod", names.pod_name("search", 0), "-n", ns)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "vision" and meta["labels"]["cost-center"] == "42"
    assert meta["labels"][names.LABEL_JOB] == "search"  # the operator's labels stay
    assert meta["annotations"]["example.com/owner"] == "alice"
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["securityContext"]["runAsUser"] == UID and spec["securityContext"]["runAsNonRoot"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "emg-data", "readOnly": True}
    assert names.CHECKPOINT_VOLUME in volumes
    (trainer,) = spec["containers"]
    mounts = {m["name"]: m for m in trainer["volumeMounts"]}
    assert mounts["data"] == {"name": "data", "mountPath": "/data", "readOnly": True}
    assert trainer["envFrom"] == [{"configMapRef": {"name": "extra-env"}}]
    (init,) = spec["initContainers"]
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    (init_status,) = pod["status"]["initContainerStatuses"]
    assert init_status["state"]["terminated"]["exitCode"] == 0  # read, and read-only
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == names.service_account_name("search")
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--timeout=60s")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (
            {"spec": {"restartPolicy": "Always"}},
            "spec.template.spec.restartPolicy is set by the operator",
        ),
        (
            {"spec": {"terminationGracePeriodSeconds": 5}},
            "set spec.terminationGracePeriodSeconds instead",
        ),
        (
            {"spec": {"serviceAccountName": "admin"}},
            "serviceAccountName/automountServiceAccountToken",
        ),
        ({"spec": {"hostname": "x"}}, "hostname/subdomain are set by the operator"),
        ({"spec": {"tolerations": []}}, "with the TuningJob's own spec fields"),
        ({"spec": {"hostNetwork": True}}, "not allowed by the restricted Pod Security Standard"),
        ({"spec": {"containers": [{"name": "sidecar"}]}}, 'supported values: "trainer"'),
        (
            {"spec": {"volumes": [{"name": "checkpoints", "emptyDir": {}}]}},
            "checkpoints, spec, script and dshm are the operator's volumes",
        ),
        (
            {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}},
            "hostPath is not allowed by the restricted Pod Security Standard",
        ),
        (
            {"spec": {"containers": [{"name": "trainer", "command": ["sh"]}]}},
            "image, command, args, env, resources and ports are the operator's",
        ),
        (
            {
                "spec": {
                    "containers": [{"name": "trainer", "securityContext": {"privileged": True}}]
                }
            },
            "privileged and allowPrivilegeEscalation are not allowed",
        ),
        (
            {"spec": {"initContainers": [{"name": "trainer", "image": "x"}]}},
            "trainer is the trainer container's name",
        ),
        (
            {
                "spec": {
                    "initContainers": [
                        {"name": "i", "image": "x", "securityContext": {"runAsUser": 0}}
                    ]
                }
            },
            "runAsUser 0 (root) is not allowed",
        ),
        ({"spec": {"securityContext": {"runAsNonRoot": False}}}, "runAsNonRoot must stay true"),
        ({"metadata": {"labels": {"tuneop.io/attempt": "9"}}}, "the tuneop.io/ prefix"),
        ({"metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}}}, "the operator's labels"),
    ],
)
def test_the_api_server_refuses_a_template_setting_an_owned_field(
    kubectl: Kubectl, template: dict[str, Any], message: str
):
    stderr = dry_run_rejected(kubectl, sample("owned", "default", template=template))
    assert message in stderr, stderr


def test_kubectl_explain_describes_the_template(kubectl: Kubectl):
    out = kubectl("explain", "tuningjob.spec.template.spec").stdout
    assert "partial PodSpec" in out and "restartPolicy" in out
    gpu = kubectl("explain", "tuningjob.spec.distribution.gpuResource").stdout
    assert "amd.com/gpu" in gpu


def test_a_template_the_operator_refuses_fails_the_job_then_reopens_once_fixed(e2e: Env):
    ns = e2e.namespace("template-owned")
    template = {
        "spec": {
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "share", "nfs": {"server": "nfs.example.com", "path": "/"}},
            ],
            "containers": [
                {
                    "name": "trainer",
                    "volumeMounts": [{"name": "scratch", "mountPath": "/checkpoints/scratch"}],
                    "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}},
                }
            ],
        }
    }
    e2e.submit(ns, tuner=ONE_TRIAL, distribution={"gpusPerWorker": 0}, template=template)
    status = e2e.wait_phase(ns, "Failed", timeout=60)
    failed = required_condition(status, "Failed")
    assert failed["reason"] == "InvalidSpec", failed
    message = failed["message"]
    assert "spec.template.spec.volumes[1].nfs: volume type not allowed" in message
    assert (
        "spec.template.spec.containers[0].volumeMounts[0].mountPath: /checkpoints/scratch "
        "overlaps the operator's mount /checkpoints"
    ) in message
    assert "spec.template.spec.containers[0].securityContext.capabilities.add: SYS_ADMIN" in message
    events = e2e.kubectl.events(ns, "search")
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "InvalidSpec")]
    assert "spec.template.spec.volumes[1].nfs" in events[0]["message"]
    assert e2e.kubectl.pods(ns, "search") == []
    # the operator re-checks what it rejected itself: fixing the template starts the job
    patch = {"spec": {"template": {"spec": {"volumes": None, "containers": None}}}}
    e2e.kubectl("patch", "tj", "search", "-n", ns, "--type=merge", "-p", json.dumps(patch))
    wait_for(lambda: e2e.kubectl.pods(ns, "search"), 60, "the trainer pod")
    wait_for(lambda: "Created" in e2e.reasons(ns), 30, "the Created event")
    assert e2e.reasons(ns)[:3] == ["InvalidSpec", "SpecChanged", "Created"]
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--timeout=60s")


@pytest.mark.usefixtures("policy")
def test_the_admission_policys_image_limit_covers_init_containers(kubectl: Kubectl):
    """The chart's policy (tests/e2e/admission.py, with its example limits) judges the
    images of spec.template's init containers like spec.image, and admits a job that
    leaves spec.image to the operator's default."""
    init = {"name": "fetch", "image": "docker.io/evil/miner:latest"}
    bad = admission.job("bad-init", template={"spec": {"initContainers": [init]}})
    stderr = admission.policy_rejected(kubectl, bad)
    assert 'spec.template.spec.initContainers image(s) "docker.io/evil/miner:latest"' in stderr
    allowed = {**init, "image": "registry.example.com/ml/fetch:1"}
    good = admission.job("good-init", template={"spec": {"initContainers": [allowed]}})
    del good["spec"]["image"]
    created = kubectl("create", "-f", "-", input=yaml.safe_dump(good), check=False)
    assert created.returncode == 0, created.stderr
    kubectl("delete", "tj", "good-init", "-n", good["metadata"]["namespace"], "--wait=false")


def test_a_pod_the_api_server_refuses_is_reported_on_the_job(e2e: Env):
    """What only the API server judges (here a claim volume without claimName) is not an
    endless silent retry: condition Running=False PodRejected with the server's reason,
    one Warning Event, no pod."""
    ns = e2e.namespace("template-refused")
    template = {"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {}}]}}
    e2e.submit(ns, tuner=ONE_TRIAL, distribution={"gpusPerWorker": 0}, template=template)
    status = e2e.wait_status(
        ns,
        lambda s: any(c.get("reason") == "PodRejected" for c in s.get("conditions") or []),
        60,
        "condition PodRejected",
    )
    running = required_condition(status, "Running")
    assert running["status"] == "False", running
    assert "persistentVolumeClaim.claimName" in running["message"], running
    wait_for(lambda: "PodRejected" in e2e.reasons(ns), 30, "the PodRejected event")
    assert e2e.reasons(ns) == ["PodRejected"] and e2e.kubectl.pods(ns, "search") == []
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--timeout=60s")
