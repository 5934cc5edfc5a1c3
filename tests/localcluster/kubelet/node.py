"""One real node: containerd + the kubelet, registered with a local control plane
(test infrastructure).

The kubelet is the one built by `make cluster-tools` at the control plane's version. It
authenticates as ``system:node:<name>`` (group ``system:nodes``: the Node authorizer),
serves its API on its InternalIP, the pod bridge's gateway address (the kubelet refuses a
loopback node IP), with a certificate of the cluster CA (so the API server's
logs, exec, attach and port-forward reach it) and trusts the API server's kubelet
client certificate. GPUs have no device plugin here: the node advertises
``nvidia.com/gpu`` as an extended resource on its status, which the scheduler counts and
the kubelet admits without a plugin. The node carries the taint :data:`TAINT`, so only
pods that tolerate it land there.

Kubelet settings this machine needs, each with its reason:

- ``failCgroupV1: false``: the machine's cgroup controllers are v1 (a hybrid layout with
  only an empty v2 mount); kubelet 1.35 refuses v1 unless told otherwise.
- ``cgroupDriver: cgroupfs``: no systemd runs here (containerd's runc uses cgroupfs too).
- ``failSwapOn: false``: the kubelet's check reads the swap state; none is configured here
  but the option keeps a machine with swap usable.
- ``evictionHard`` at 0 and image GC at 100 %: a shared development disk is not the
  node's to police, and no registry can give back an image the GC removed.
- ``resolvConf: ""``, no ``clusterDNS``: no DNS server answers pods here.
- Pods' rlimits are containerd's defaults (nofile 1024), below this machine's hard
  limits: root lacks CAP_SYS_RESOURCE, so nothing may raise one.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hack.images import built_archive
from tests.localcluster.controlplane import ControlPlane, free_port, popen_owned
from tests.localcluster.kubelet import network
from tests.localcluster.kubelet.runtime import Containerd, mounts_under, unmount_under

TAINT = {"key": "tuneop.io/real-node", "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
READY_TIMEOUT_SECONDS = 120.0


@dataclass
class RealNodeConfig:
    name: str = "real-node-0"
    gpus: int = 4
    images: dict[str, Path] = field(default_factory=dict)  # reference → docker archive
    sandbox_image: str = "docker.io/tuneop/pause:0.1.0"
    subnet_index: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    # TAINT by default: in the suite's cluster only pods that ask land here
    taints: list[dict[str, str]] = field(default_factory=lambda: [TAINT])


def real_node_config(*images: str, **fields: Any) -> RealNodeConfig:
    """A real node's config with `images` (names in hack/images.py) and the pause image
    imported, as `make images-cpu` built them for this work tree; `fields` set the rest
    (name, taints, ...)."""
    archives = dict(built_archive(name) for name in (*images, "pause"))
    return RealNodeConfig(images=archives, **fields)


class KubeletNode:
    """containerd + kubelet for one Node; :meth:`stop` leaves no container behind."""

    def __init__(self, cp: ControlPlane, workdir: Path, cache: Path, config: RealNodeConfig):
        self.cp, self.config = cp, config
        self.workdir = workdir / config.name
        self.runtime = Containerd(config.name, cache, self.workdir, config.sandbox_image)
        self.kubelet: subprocess.Popen[bytes] | None = None
        self.log = self.workdir / "kubelet.log"
        self.port = 0
        self.ip = network.gateway(config.subnet_index)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.runtime.start()
        for reference, archive in self.config.images.items():
            self.runtime.import_image(reference, archive)
        network.create_bridge(self.config.subnet_index)
        network.expose_apiserver(self.config.subnet_index, self.cp.apiserver_port)
        (self.runtime.cni_conf / "10-tuneop.conflist").write_text(
            json.dumps(network.bridge_conf(self.config.subnet_index), indent=2)
        )
        self.port = free_port()
        config_path = self._write_config()
        kubeconfig = self._write_kubeconfig()
        with self.log.open("ab") as out:
            self.kubelet = popen_owned(
                [str(self.cp.bin_dir / "kubelet"), f"--config={config_path}",
                 f"--kubeconfig={kubeconfig}", f"--hostname-override={self.config.name}",
                 f"--node-ip={self.ip}", f"--root-dir={self.workdir / 'kubelet'}",
                 f"--node-labels={_labels(self.config.labels)}", "--v=1"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.workdir, start_new_session=True,
            )  # fmt: skip
        self._wait_ready()
        self._advertise_gpus()

    def _write_config(self) -> Path:
        serving_cert, serving_key = self.cp.issue_cert(
            f"kubelet-{self.config.name}", self.config.name, [], [self.ip], True
        )
        config: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.ip,
            "port": self.port,
            "readOnlyPort": 0,
            "healthzPort": 0,
            "tlsCertFile": str(serving_cert),
            "tlsPrivateKeyFile": str(serving_key),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cp.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.runtime.socket}",
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "resolvConf": "",
            "evictionHard": {"memory.available": "0%", "nodefs.available": "0%",
                             "imagefs.available": "0%", "nodefs.inodesFree": "0%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "registerWithTaints": self.config.taints,
            "nodeStatusUpdateFrequency": "5s",
            "nodeStatusReportFrequency": "10s",
            "serializeImagePulls": False,
            "podPidsLimit": -1,
            "shutdownGracePeriod": "0s",
        }  # fmt: skip
        path = self.workdir / "kubelet-config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _write_kubeconfig(self) -> Path:
        name = f"system:node:{self.config.name}"
        cert, key = self.cp.issue_cert(
            f"node-{self.config.name}", name, ["system:nodes"], [], False
        )
        return self.cp.write_kubeconfig(self.workdir / "kubelet.kubeconfig", name, cert, key)

    def node(self) -> dict[str, Any] | None:
        proc = self.cp.kubectl("get", "node", self.config.name, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while True:
            assert self.kubelet is not None
            if self.kubelet.poll() is not None:
                raise RuntimeError(f"kubelet exited {self.kubelet.returncode}: {_tail(self.log)}")
            node = self.node()
            conditions = (node or {}).get("status", {}).get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {self.config.name} not Ready: {_tail(self.log)}")
            time.sleep(0.5)

    def _advertise_gpus(self) -> None:
        gpus = str(self.config.gpus)
        patch = {"status": {"capacity": {"nvidia.com/gpu": gpus},
                            "allocatable": {"nvidia.com/gpu": gpus}}}  # fmt: skip
        self.cp.kubectl("patch", "node", self.config.name, "--subresource=status",
                        "--type=merge", "-p", json.dumps(patch))  # fmt: skip

    def drain(self, timeout: float = 30.0) -> None:
        """Cordon the node, delete its pods and wait until the kubelet stopped their
        sandboxes: that is what releases their network namespaces and addresses (CNI
        DEL). Cordoned first, so a controller's replacement pod cannot land here."""
        if self.kubelet is None or self.kubelet.poll() is not None or not self.cp.running:
            return
        self.cp.kubectl("cordon", self.config.name, check=False)
        self.cp.kubectl("delete", "pods", "--all-namespaces", "--grace-period=0", "--force",
                        f"--field-selector=spec.nodeName={self.config.name}", "--wait=false",
                        check=False)  # fmt: skip
        deadline = time.monotonic() + timeout
        while self.runtime.running_tasks() and time.monotonic() < deadline:
            time.sleep(0.5)

    def stop(self) -> None:
        self.drain()
        if self.kubelet is not None and self.kubelet.poll() is None:
            self.kubelet.terminate()
            try:
                self.kubelet.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kubelet.kill()
                self.kubelet.wait()
        self.kubelet = None
        self.runtime.stop()
        unmount_under(self.workdir)  # volumes the kubelet mounted (tmpfs, binds)
        network.hide_apiserver(self.config.subnet_index, self.cp.apiserver_port)
        network.delete_bridge(self.config.subnet_index)
        self.cp.kubectl("delete", "node", self.config.name, "--ignore-not-found", check=False)

    def containers(self) -> list[str]:
        """containerd's own listing of the node's running containers: one line each,
        pod namespace/name, container and image (what `crictl ps` shows)."""
        lines = []
        for task in self.runtime.running_tasks():
            info = json.loads(self.runtime.ctr("containers", "info", task, check=False).stdout
                              or "{}")  # fmt: skip
            labels = info.get("Labels") or {}
            if labels.get("io.cri-containerd.kind") != "container":
                continue  # a pod's sandbox
            pod = "/".join(labels.get(f"io.kubernetes.pod.{k}", "?") for k in ("namespace", "name"))
            container = labels.get("io.kubernetes.container.name")
            lines.append(f"{task[:13]}  {pod}  {container}  {info.get('Image')}")
        return lines

    def leftovers(self) -> list[str]:
        """What :meth:`stop` must leave behind: nothing (processes, mounts, the bridge)."""
        out = [f"kubelet {self.kubelet.pid}"] if self.kubelet is not None else []
        out += [f"{what} of node {self.config.name}" for what in self.runtime.leftovers()]
        out += [f"mount {point}" for point in mounts_under(self.workdir)]
        if network.bridge_exists(self.config.subnet_index):
            out.append(f"bridge {network.bridge_name(self.config.subnet_index)}")
        return out


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
