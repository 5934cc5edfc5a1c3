"""Local-path volume provisioner (test infrastructure).

An external provisioner in the Kubernetes sense: for every PVC of a StorageClass whose
provisioner is :data:`PROVISIONER` it creates a `local` PersistentVolume under
``<root>/<pv-name>`` pre-bound to the claim (``claimRef``); the real PV controller in
kube-controller-manager completes the binding. The directory outlives pods. When a
PV with reclaimPolicy Delete is Released, the directory and the PV are deleted.
Polls once a second (the cluster is small).

A StorageClass with the parameter ``tuneop.io/backing: tmpfs`` (:func:`sized_class`)
backs each claim with a tmpfs of the claim's requested size mounted on its directory,
so the claim holds what it asked for and no more, and can be made full without filling
the machine's disk (:func:`fill`, :func:`unfill`: the chaos soak's claim-full fault).
Memory-backed: only what is written costs RAM.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from kubernetes import client

log = logging.getLogger("tuneop.nodeagent")
PROVISIONER = "tuneop.io/local-path"
STORAGE_CLASS = "local-path"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
BACKING = "tuneop.io/backing"
TMPFS = "tmpfs"


def storage_class() -> dict[str, Any]:
    """The default StorageClass of the local cluster."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


def sized_class(name: str) -> dict[str, Any]:
    """A StorageClass of this provisioner whose claims are tmpfs mounts of their size."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": PROVISIONER,
        "parameters": {BACKING: TMPFS},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def size_bytes(quantity: str) -> int:
    """A storage quantity ("1Gi", "500M", "1048576") in bytes."""
    for suffix, factor in (*_BINARY.items(), *_DECIMAL.items()):
        if quantity.endswith(suffix):
            return int(float(quantity[: -len(suffix)]) * factor)
    return int(float(quantity))


def fill(path: Path, attempts: int = 5) -> None:
    """Make the tmpfs claim at `path` full: its size down to what it holds now (tmpfs
    refuses less, so a write landing in between is retried). `unfill` gives it back."""
    for attempt in range(attempts):
        st = os.statvfs(path)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        try:
            _remount(path, max(used, st.f_frsize))
            return
        except subprocess.CalledProcessError:
            if attempt == attempts - 1:
                raise


def unfill(path: Path, size: int) -> None:
    """The claim's size back (its capacity: two fills overlapping restore the same)."""
    _remount(path, size)


def _remount(path: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)],
                   check=True, capture_output=True)  # fmt: skip


def _unmount(path: Path) -> None:
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def persistent_volume(pvc: dict[str, Any], root: Path, reclaim: str) -> dict[str, Any]:
    """The `local` PV for a claim (pure). `local`, not hostPath: the kubelet applies a
    pod's fsGroup to a local volume (hostPath it leaves alone), as a CSI driver's would be.
    Every node of this one machine sees the directory, so any node may mount it."""
    meta = pvc["metadata"]
    name = f"pvc-{meta['uid']}"
    storage = ((pvc["spec"].get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": pvc["spec"].get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": reclaim,
            "storageClassName": pvc["spec"]["storageClassName"],
            "volumeMode": pvc["spec"].get("volumeMode") or "Filesystem",
            "local": {"path": str(root / name)},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "Exists"}
                            ]
                        }
                    ]
                }
            },
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }


class LocalPathProvisioner:
    def __init__(self, api: client.ApiClient, root: Path) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.storage = client.StorageV1Api(api)
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="local-path", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for path in self.root.iterdir():  # the tmpfs claims left (their PVs outlive us)
            _unmount(path)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception as exc:
                log.warning("local-path provisioner: %s", exc)
            self._stop.wait(1.0)

    def reconcile(self) -> None:
        classes = {
            sc.metadata.name: sc for sc in self.storage.list_storage_class().items
            if sc.provisioner == PROVISIONER
        }  # fmt: skip
        existing = {pv.metadata.name: pv for pv in self.core.list_persistent_volume().items}
        for pvc in self.core.list_persistent_volume_claim_for_all_namespaces().items:
            cls = pvc.spec.storage_class_name
            if cls not in classes or pvc.spec.volume_name or pvc.metadata.deletion_timestamp:
                continue
            if f"pvc-{pvc.metadata.uid}" in existing:
                continue
            sc = classes[cls]
            body = persistent_volume(
                self.api.sanitize_for_serialization(pvc), self.root, sc.reclaim_policy or "Delete"
            )
            self._make_directory(self.root / body["metadata"]["name"], sc, body)
            try:
                self.core.create_persistent_volume(body, _preload_content=False)
                log.info("provisioned %s for %s/%s", body["metadata"]["name"],
                         pvc.metadata.namespace, pvc.metadata.name)  # fmt: skip
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
        for pv in existing.values():
            annotations = pv.metadata.annotations or {}
            if (
                annotations.get(PROVISIONED_BY) == PROVISIONER
                and pv.status.phase in ("Released", "Failed")
                and pv.spec.persistent_volume_reclaim_policy == "Delete"
                and not pv.metadata.deletion_timestamp
            ):
                if pv.spec.local is not None:
                    path = Path(pv.spec.local.path)
                    if path.parent == self.root:
                        _unmount(path)
                        shutil.rmtree(path, ignore_errors=True)
                try:
                    self.core.delete_persistent_volume(pv.metadata.name, _preload_content=False)
                except client.ApiException as exc:
                    if exc.status != 404:
                        raise

    def _make_directory(self, path: Path, sc: Any, pv: dict[str, Any]) -> None:
        """The claim's directory; a tmpfs of its size when its class asks for one."""
        path.mkdir(parents=True, exist_ok=True)
        if (sc.parameters or {}).get(BACKING) == TMPFS and not os.path.ismount(path):
            size = size_bytes(pv["spec"]["capacity"]["storage"])
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs",
                            str(path)], check=True, capture_output=True)  # fmt: skip
