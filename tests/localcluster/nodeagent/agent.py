"""The node agent proper (test infrastructure): Node registration, heartbeat, pod watch.

See the package docstring for what is and is not emulated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import os
import signal
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from tests.forkserver import ENV_SWITCH as FORKSERVER_SWITCH
from tests.forkserver import ForkServer

from . import podspec
from .logserver import LogServer
from .pods import PodWorker
from .shim import BIND_IP_ENV, build_shim

log = logging.getLogger("tuneop.nodeagent")
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 5.0
RECOVER_SECONDS = 180.0
"""How long a crashed node keeps trying to register again (an API server outage)."""
AGENT_MARKER_ENV = "TUNEOP_LOCAL_NODE_DIR"
POD_NETWORK_ENV = "TUNEOP_LOCAL_POD_NETWORK"
"""The second octet of this process's pod IPs (``127.<network>.<node+1>.<n>``), 0 by
default: local clusters that run at once on one host (one per pytest-xdist worker) each
take their own, so their pods never share an address and port."""


def pod_network() -> int:
    return int(os.environ.get(POD_NETWORK_ENV, "0")) % 256


"""Set in every container's env: how leftover processes are found (pids get reused)."""


@dataclasses.dataclass
class NodeConfig:
    """One Node of the local cluster."""

    name: str = "gpu-node-0"
    gpus: int = 4
    cpu: str = "8"
    memory: str = "32Gi"
    pods: int = 110
    labels: dict[str, str] = dataclasses.field(default_factory=dict)


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeAgent:
    """Runs the pods bound to one Node as local processes (a stand-in kubelet).

    ``api`` is an admin ApiClient of the cluster (the agent acts with cluster-admin
    rights, not as system:node); ``server`` the API server URL pods reach through
    KUBERNETES_SERVICE_HOST/PORT; ``serving_cert`` the (cert, key) of the kubelet port,
    verified by nothing (the API server does not check kubelet certs by default) but
    issued by the cluster CA; ``ca_cert`` the cluster CA (verifies the API server's
    client certificate on the kubelet port and fills ca.crt if kube-root-ca.crt is
    missing)."""

    def __init__(
        self,
        config: NodeConfig,
        api: client.ApiClient,
        workdir: Path,
        server: str,
        ca_cert: Path,
        serving_cert: tuple[Path, Path],
        index: int = 0,
        kubernetes_version: str = "v0.0.0",
        fork_python: bool = False,
    ) -> None:
        self.config = config
        self.name = config.name
        self.api = api
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self.workdir = workdir / "nodes" / config.name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.created_paths_file = self.workdir / "created-mountpoints"
        url = urllib.parse.urlsplit(server)
        self.api_host = url.hostname or "127.0.0.1"
        self.api_port = url.port or 443
        self.ca_cert = ca_cert
        self.serving_cert = serving_cert
        self.host_ip = "127.0.0.1"
        self.index = index
        self.pod_net = f"127.{pod_network()}.{index + 1}."
        self.kubernetes_version = kubernetes_version
        self.workers: dict[str, PodWorker] = {}
        self.lock = threading.RLock()
        self.pids: set[int] = set()
        self._ips_in_use: set[str] = set()
        self._next_ip = 2
        self._stop = threading.Event()
        self._hosts_now = threading.Event()
        self._threads: list[threading.Thread] = []
        self.logs: LogServer | None = None
        self.bind_shim = build_shim()
        self.fork_python = fork_python
        self.python_forks: ForkServer | None = None
        self.running = False
        self.crashed = False

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self.crashed = False
        self.logs = LogServer(self, *self.serving_cert, client_ca=self.ca_cert)
        self.logs.start()
        self._register()
        self._renew_lease()
        if self.fork_python and os.environ.get(FORKSERVER_SWITCH, "1") != "0":
            self.python_forks = ForkServer(self.workdir, self._forks_env())
        for target in (self._heartbeat_loop, self._watch_loop, self._hosts_loop):
            thread = threading.Thread(target=target, name=f"{self.name}-{target.__name__}")
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        self.running = True

    def stop(self, delete_node: bool = True) -> None:
        """Shut the node down: SIGTERM (3 s) then SIGKILL every pod's processes, stop
        the heartbeat and, with ``delete_node``, delete the Node object."""
        self._halt(crash=False)
        if delete_node:
            try:
                self.core.delete_node(self.name, _preload_content=False)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise

    def crash(self) -> None:
        """Node loss: SIGKILL all pod processes, stop heartbeats and the kubelet port,
        report nothing more. The node goes NotReady and the real controllers act."""
        self._halt(crash=True)
        self.crashed = True

    def recover(self, timeout: float = RECOVER_SECONDS) -> None:
        """Boot the crashed node again (like a kubelet restart, which retries its
        registration until the API server answers: an outage may overlap the reboot)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.start()
                return
            except Exception as exc:
                self._halt(crash=True)  # undo the partial start (its log server)
                self.crashed = True
                if time.monotonic() > deadline:
                    raise
                log.warning("node %s recovering: %s (retrying)", self.name, exc)
                time.sleep(2.0)

    def _halt(self, crash: bool) -> None:
        self._stop.set()
        self._hosts_now.set()  # wake the hosts loop
        with self.lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker.stop(crash=crash)
        for worker in workers:
            worker.finished.wait(15)
        self.kill_all_processes()  # the fork server too (it has the marker)
        if self.python_forks is not None:
            self.python_forks.stop()
            self.python_forks = None
        with self.lock:
            self.workers.clear()
            self._ips_in_use.clear()
        if self.logs is not None:
            self.logs.stop()
            self.logs = None
        for thread in self._threads:
            # The watch thread may sit in a watch request for up to 5 s; it does nothing
            # once _stop is set, so it is not waited for.
            thread.join(0.5 if thread.name.endswith("_watch_loop") else 15)
        self._threads.clear()
        self.running = False

    def cleanup_mountpoints(self) -> None:
        """Remove the (empty) mount points the launchers created on the host file system
        (see :func:`remove_mountpoints`). Call once this agent's pods are gone."""
        remove_mountpoints(self.created_paths_file)

    # --- processes ------------------------------------------------------------------
    def track(self, pid: int) -> None:
        with self.lock:
            self.pids.add(pid)

    def untrack(self, pid: int) -> None:
        with self.lock:
            self.pids.discard(pid)

    def kill_all_processes(self) -> None:
        """SIGKILL every container's process group, and any process that escaped its
        group (found by the environment marker)."""
        with self.lock:
            pids = list(self.pids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for pid in self.live_processes():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def live_processes(self) -> list[int]:
        """Live (non-zombie) processes started by this agent's containers, found by
        the marker in their environment (inherited by their children)."""
        marker = f"{AGENT_MARKER_ENV}={self.workdir}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if marker not in (entry / "environ").read_bytes().split(b"\0"):
                    continue
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                found.append(int(entry.name))
        return found

    def allocate_ip(self) -> str:
        with self.lock:
            for _ in range(253):
                ip = f"{self.pod_net}{self._next_ip}"
                self._next_ip = 2 if self._next_ip >= 254 else self._next_ip + 1
                if ip not in self._ips_in_use:
                    self._ips_in_use.add(ip)
                    return ip
        raise RuntimeError(f"node {self.name}: no free pod IP")

    def release_ip(self, ip: str) -> None:
        with self.lock:
            self._ips_in_use.discard(ip)

    def _runtime_env(self) -> dict[str, str]:
        """What every container's process gets from the agent, whatever its pod."""
        shim = {"LD_PRELOAD": str(self.bind_shim)} if self.bind_shim else {}
        return {
            **shim,
            AGENT_MARKER_ENV: str(self.workdir),
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "PYTHONUNBUFFERED": "1",
        }

    def base_env(self, pod: dict[str, Any], pod_ip: str) -> dict[str, str]:
        """What every container gets before its own env (runtime + service links, and
        the bind shim so wildcard binds take the pod IP only)."""
        host, port = self.api_host, str(self.api_port)
        shim = {BIND_IP_ENV: pod_ip} if self.bind_shim else {}
        return {
            **self._runtime_env(),
            **shim,
            "HOSTNAME": podspec.pod_hostname(pod),
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{host}:{port}",
        }

    def _forks_env(self) -> dict[str, str]:
        """The fork server's environment: a Python container's as the agent gives it,
        without the pod's own values, so that every container adding nothing read at
        interpreter start (tests/forkserver.py's FIXED_AT_START) forks."""
        return {**self._runtime_env(), "PYTHONPATH": os.pathsep.join(podspec.REPO_PYTHONPATH)}

    def worker(self, namespace: str, name: str) -> PodWorker | None:
        with self.lock:
            for w in self.workers.values():
                if w.namespace == namespace and w.pod_name == name:
                    return w
        return None

    # --- node object ------------------------------------------------------------------
    def _node_status(self) -> dict[str, Any]:
        cfg = self.config
        resources = {
            "cpu": cfg.cpu,
            "memory": cfg.memory,
            "pods": str(cfg.pods),
            "ephemeral-storage": "100Gi",
            podspec.GPU_RESOURCE: str(cfg.gpus),
        }
        now = _micro_now()[:19] + "Z"
        conds = [
            ("Ready", "True", "KubeletReady", "tuneop local node agent is posting ready status"),
            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "ok"),
        ]
        assert self.logs is not None
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": m,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
                for t, s, r, m in conds
            ],
            "addresses": [{"type": "InternalIP", "address": self.host_ip}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.logs.port}},
            "nodeInfo": {
                "machineID": self.name,
                "systemUUID": self.name,
                "bootID": str(time.time()),
                "kernelVersion": os.uname().release,
                "osImage": "tuneop local node agent",
                "containerRuntimeVersion": "tuneop://0.1.0",
                "kubeletVersion": self.kubernetes_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def _register(self) -> None:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **self.config.labels,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {},
        }
        try:
            self.core.create_node(body, _preload_content=False)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            self.core.patch_node(
                self.name, {"metadata": {"labels": labels}}, _preload_content=False
            )
        self.core.patch_node_status(
            self.name, {"status": self._node_status()}, _preload_content=False
        )

    def _renew_lease(self) -> None:
        spec = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": _micro_now(),
        }
        try:
            self.coordination.patch_namespaced_lease(
                self.name, LEASE_NAMESPACE, {"spec": spec}, _preload_content=False
            )
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            node = self.core.read_node(self.name)
            body = {
                "metadata": {
                    "name": self.name,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": self.name,
                            "uid": node.metadata.uid,
                        }
                    ],
                },
                "spec": spec,
            }
            self.coordination.create_namespaced_lease(LEASE_NAMESPACE, body, _preload_content=False)

    def _heartbeat_loop(self) -> None:
        last_status = time.monotonic()
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self._renew_lease()
                if time.monotonic() - last_status >= 10:
                    conds = self._node_status()["conditions"]
                    self.core.patch_node_status(
                        self.name, {"status": {"conditions": conds}}, _preload_content=False
                    )
                    last_status = time.monotonic()
            except Exception as exc:  # keep beating through API hiccups
                log.warning("node %s heartbeat: %s", self.name, exc)

    # --- pods --------------------------------------------------------------------------
    def _watch_loop(self) -> None:
        selector = f"spec.nodeName={self.name}"
        while not self._stop.is_set():
            try:
                pods = self.core.list_pod_for_all_namespaces(field_selector=selector)
                items = [self.api.sanitize_for_serialization(p) for p in pods.items]
                self._sync(items)
                stream = watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=pods.metadata.resource_version,
                    timeout_seconds=5,
                )
                for event in stream:
                    if self._stop.is_set():
                        break
                    pod = self.api.sanitize_for_serialization(event["object"])
                    if event["type"] == "DELETED":
                        self._deleted(pod["metadata"]["uid"])
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self._upsert(pod)
            except Exception as exc:
                if not self._stop.is_set():
                    log.warning("node %s pod watch: %s", self.name, exc)
                    self._stop.wait(1)

    def _sync(self, pods: list[dict[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            self._upsert(pod)
        with self.lock:
            missing = [uid for uid in self.workers if uid not in seen]
        for uid in missing:
            self._deleted(uid)

    def _upsert(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            if self._stop.is_set():
                return
            worker = self.workers.get(uid)
            if worker is None:
                ip = (pod.get("status") or {}).get("podIP")
                if ip and ip.startswith(self.pod_net) and ip not in self._ips_in_use:
                    self._ips_in_use.add(ip)  # keep the address over an agent restart
                else:
                    ip = self.allocate_ip()
                worker = PodWorker(self, pod, ip)
                self.workers[uid] = worker
                worker.start()
                return
        worker.update(pod)

    def _deleted(self, uid: str) -> None:
        with self.lock:
            worker = self.workers.get(uid)
        if worker is not None:
            worker.deleted()

    def _reap(self) -> None:
        with self.lock:
            for uid, worker in list(self.workers.items()):
                if worker.finished.is_set():
                    del self.workers[uid]

    # --- /etc/hosts ----------------------------------------------------------------------
    def refresh_hosts_soon(self) -> None:
        self._hosts_now.set()

    def _hosts_loop(self) -> None:
        while not self._stop.is_set():
            self._hosts_now.wait(1.0)
            self._hosts_now.clear()
            self._reap()
            try:
                self.refresh_hosts()
            except Exception as exc:
                if not self._stop.is_set():
                    log.warning("node %s hosts: %s", self.name, exc)

    def refresh_hosts(self) -> None:
        with self.lock:
            workers = [w for w in self.workers.values() if w.volumes is not None]
        if not workers:
            return
        services = self.core.list_service_for_all_namespaces()
        headless = {
            (s.metadata.namespace, s.metadata.name)
            for s in services.items
            if s.spec.cluster_ip == "None"
        }
        peers: list[tuple[str, list[str]]] = []
        if headless:
            for pod in self.core.list_pod_for_all_namespaces().items:
                sub = pod.spec.subdomain
                if sub and pod.status.pod_ip and (pod.metadata.namespace, sub) in headless:
                    data = self.api.sanitize_for_serialization(pod)
                    peers.append((pod.status.pod_ip, podspec.dns_names(data)))
        for w in workers:
            text = podspec.hosts_file(w.pod, w.pod_ip, peers)
            try:
                if w.hosts_path.read_text() != text:
                    with open(w.hosts_path, "w") as f:  # same inode: the bind mount sees it
                        f.write(text)
            except FileNotFoundError:
                pass


def mount_targets() -> set[str]:
    """Mount points of every process's mount namespace (from /proc/*/mountinfo)."""
    targets: set[str] = set()
    for mountinfo in Path("/proc").glob("[0-9]*/mountinfo"):
        try:
            lines = mountinfo.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 4:
                targets.add(fields[4].encode().decode("unicode_escape"))
    return targets


def remove_mountpoints(created_paths_file: Path) -> None:
    """Remove the empty directories/files listed in ``created_paths_file``, deepest
    first, unless a process in any mount namespace (e.g. a pod of another local cluster
    on this machine) has something mounted there: removing it would detach that mount."""
    try:
        paths = created_paths_file.read_text().splitlines()
    except FileNotFoundError:
        return
    in_use = mount_targets()
    for path in sorted(set(paths), key=lambda p: p.count("/"), reverse=True):
        real = os.path.realpath(path)  # /var/run/... shows as /run/... in mountinfo
        if any(t == real or t.startswith(real.rstrip("/") + "/") for t in in_use):
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            elif os.path.isfile(path) and os.path.getsize(path) == 0:
                os.unlink(path)
        except OSError:
            pass
    created_paths_file.unlink()
