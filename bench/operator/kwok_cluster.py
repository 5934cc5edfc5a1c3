"""A control plane whose nodes and pods kwok simulates (the scale benchmark's cluster).

The real etcd, kube-apiserver, kube-controller-manager and kube-scheduler
(tests/localcluster/controlplane.py); kwok (sigs.k8s.io/kwok, built by
`hack/cluster-tools/build.sh kwok`) plays the kubelets of `nodes` fake GPU nodes: it keeps
their status and Leases as a kubelet does, turns a pod bound to one of them Running
(kwok's pod-ready stage) and, when it is deleted, reports its trainer's exit and removes
it (bench/operator/kwok-stages.yaml). No container runs. Checkpoint claims bind to
PersistentVolumes made beforehand (StorageClass `STORAGE_CLASS`, no provisioner), bound
by the PersistentVolume controller as on a cluster with static volumes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.localcluster import tools
from tests.localcluster.controlplane import ControlPlane, _die_with_parent

HERE = Path(__file__).resolve().parent
STORAGE_CLASS = "bench-static"
FAKE_NODE = "kwok.x-k8s.io/node"
GPU = "nvidia.com/gpu"
Obj = dict[str, Any]


def start_kwok(cp: ControlPlane, work: Path) -> subprocess.Popen[bytes]:
    """kwok for every node annotated FAKE_NODE=fake, with kwok's own node and
    pod-ready stages and the benchmark's termination stages. Pod IPs and the node IP are
    loopback addresses: nothing connects to them, and nothing should ever try another."""
    kwok = tools.kwok_dir(build=True)
    stages = [*sorted((kwok / "stages").glob("*.yaml")), HERE / "kwok-stages.yaml"]
    config = work / "kwok.yaml"
    config.write_text("\n---\n".join(p.read_text() for p in stages))
    log = (work / "kwok.log").open("ab")
    return subprocess.Popen(
        [str(kwok / "kwok"), f"--kubeconfig={cp.kubeconfig}", f"--config={config}",
         f"--manage-nodes-with-annotation-selector={FAKE_NODE}=fake",
         "--node-ip=127.0.0.1", "--cidr=127.64.0.1/12", "--node-lease-duration-seconds=40"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True, preexec_fn=_die_with_parent,
    )  # fmt: skip


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def node(name: str, gpus: int) -> Obj:
    """A fake GPU node as a kubelet would register it (capacity in its status)."""
    capacity = {"cpu": "96", "memory": "768Gi", "pods": "110", GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
            },
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def volumes(api: client.ApiClient, count: int) -> None:
    """The StorageClass and `count` available 1Gi volumes for the checkpoint claims."""
    storage = client.StorageV1Api(api)
    storage.create_storage_class({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate",
    })  # fmt: skip
    core = client.CoreV1Api(api)
    for i in range(count):
        core.create_persistent_volume({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"bench-pv-{i:05d}"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain",
                     "storageClassName": STORAGE_CLASS,
                     "hostPath": {"path": f"/nonexistent/bench-pv-{i:05d}"}},
        }, _preload_content=False)  # fmt: skip


def nodes(api: client.ApiClient, count: int, gpus: int) -> list[str]:
    core = client.CoreV1Api(api)
    names = [f"kwok-gpu-{i:04d}" for i in range(count)]
    for name in names:
        core.create_node(node(name, gpus), _preload_content=False)
    return names
