"""A local cluster: the real control plane plus node agents (test infrastructure).

:class:`LocalCluster` = a started :class:`~tests.localcluster.controlplane.ControlPlane`
+ N :class:`~tests.localcluster.nodeagent.agent.NodeAgent` (default one node
``gpu-node-0`` with 4 ``nvidia.com/gpu``; ``TUNEOP_CLUSTER_NODES=name:gpus,...``
changes that) + the local-path provisioner and its default StorageClass ``local-path``,
with helpers for tests. The ``cluster`` session fixture
(:mod:`tests.localcluster.pytest_plugin`) builds one on the session's ``control_plane``;
:func:`up_hook` does the same inside ``python -m tests.localcluster up``
(``make cluster-up``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client

from tests.localcluster import tools
from tests.localcluster.controlplane import ControlPlane
from tests.localcluster.kubelet.node import KubeletNode, RealNodeConfig
from tests.localcluster.nodeagent.agent import NodeAgent, NodeConfig, pod_network
from tests.localcluster.nodeagent.provisioner import LocalPathProvisioner, storage_class

NODES_ENV = "TUNEOP_CLUSTER_NODES"
T = TypeVar("T")


def node_configs(text: str | None = None) -> list[NodeConfig]:
    """``"gpu-node-0:4,gpu-node-1:2"`` → node configs (default: one node, 4 GPUs)."""
    text = text if text is not None else os.environ.get(NODES_ENV, "")
    configs = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, _, gpus = item.partition(":")
        configs.append(NodeConfig(name=name, gpus=int(gpus or 4)))
    return configs or [NodeConfig()]


_live: weakref.WeakSet[LocalCluster] = weakref.WeakSet()


@atexit.register
def _stop_all_at_exit() -> None:  # before the control plane's own atexit hook
    for cluster in list(_live):
        cluster.stop()


def wait_for(predicate: Callable[[], T], timeout: float, what: str, every: float = 0.5) -> T:
    """Poll ``predicate`` every ``every`` s until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


class LocalCluster:
    def __init__(
        self,
        control_plane: ControlPlane,
        workdir: Path,
        nodes: Iterable[NodeConfig] | None = None,
        fork_python: bool = False,
    ) -> None:
        """``fork_python``: the agents fork Python containers from a server with
        TensorFlow imported (:attr:`NodeAgent.fork_python`); the tests' cluster does, the
        demo's and the benchmarks' do not (they measure a pod's real start)."""
        self.control_plane = control_plane
        self.fork_python = fork_python
        self.workdir = Path(workdir).resolve()
        self.configs = list(nodes) if nodes is not None else node_configs()
        self.api = control_plane.api_client()
        self.core = client.CoreV1Api(self.api)
        self.agents: dict[str, NodeAgent] = {}
        self.provisioner = LocalPathProvisioner(self.api, self.workdir / "volumes")
        self._started = False
        self._next_index = 0
        self._removed: list[NodeAgent] = []
        self.real_nodes: dict[str, KubeletNode] = {}

    # --- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        _live.add(self)
        self._started = True
        try:
            self._create_storage_class()
            self.provisioner.start()
            for config in self.configs:
                self.add_node(config)
        except BaseException:
            self.stop()
            raise

    def _create_storage_class(self) -> None:
        try:
            client.StorageV1Api(self.api).create_storage_class(
                storage_class(), _preload_content=False
            )
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def add_node(self, config: NodeConfig) -> NodeAgent:
        """Start one more node agent and wait until the Node is Ready and schedulable."""
        cp = self.control_plane
        cert = cp.issue_cert(
            f"kubelet-{config.name}",
            f"system:node:{config.name}",
            ["system:nodes"],
            ["127.0.0.1", "localhost"],
            server=True,
        )
        agent = NodeAgent(
            config,
            cp.api_client(),
            self.workdir,
            cp.server,
            cp.ca_cert,
            cert,
            index=self._next_index,
            kubernetes_version=tools.versions()["KUBERNETES_VERSION"],
            fork_python=self.fork_python,
        )
        self._next_index += 1
        self.agents[config.name] = agent
        agent.start()
        self.wait_for(lambda: self.node_ready(config.name), 60, f"node {config.name} Ready")
        return agent

    def add_real_node(self, config: RealNodeConfig) -> KubeletNode:
        """Start a real node (containerd + kubelet) and wait until it is Ready. Its pod
        subnet is the cluster's pod network's own, so clusters running at once never
        share a pod address."""
        config.subnet_index = pod_network() * 4 + len(self.real_nodes)
        node = KubeletNode(
            self.control_plane, self.workdir / "real-nodes", tools.cache_dir(), config
        )
        self.real_nodes[config.name] = node
        node.start()
        return node

    def remove_real_node(self, name: str) -> None:
        """Stop a real node (its pods deleted, their sandboxes stopped) and delete it."""
        self.real_nodes.pop(name).stop()

    def remove_node(self, name: str) -> NodeAgent:
        """Stop a node agent (its pods' processes die) and delete its Node object."""
        agent = self.agents.pop(name)
        agent.stop(delete_node=True)
        agent.kill_all_processes()
        agent.api.close()
        self._removed.append(agent)
        return agent

    def stop(self) -> None:
        """Stop the agents (their pods' processes die), the provisioner, and remove the
        mount points the launchers created. Idempotent."""
        if not self._started:
            return
        self._started = False
        for real in self.real_nodes.values():
            with contextlib.suppress(Exception):
                real.stop()
        for agent in self.agents.values():
            if agent.running:
                with contextlib.suppress(Exception):
                    agent.stop(delete_node=self.control_plane.running)
            agent.kill_all_processes()
        self.provisioner.stop()
        for agent in [*self.agents.values(), *self._removed]:
            agent.cleanup_mountpoints()
            agent.api.close()
        self.api.close()
        _live.discard(self)

    def leftovers(self) -> list[str]:
        """Processes of any agent still alive and mounts under the workdir in this mount
        namespace: both must be empty after :meth:`stop`."""
        out = [
            f"process {pid} of node {agent.name}"
            for agent in [*self.agents.values(), *self._removed]
            for pid in agent.live_processes()
        ]
        out += [item for real in self.real_nodes.values() for item in real.leftovers()]
        with open("/proc/self/mountinfo") as f:
            for line in f:
                if str(self.workdir) in line:
                    out.append(f"mount {line.split()[4]}")
        return out

    # --- helpers for tests ----------------------------------------------------------
    def node(self, name: str | None = None) -> NodeAgent:
        return self.agents[name] if name else next(iter(self.agents.values()))

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        return self.control_plane.kubectl(*args, input=input, check=check)

    def apply(self, *objects: dict[str, Any]) -> None:
        """``kubectl apply`` of manifests given as dicts."""
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))

    def wait_for(self, predicate: Callable[[], T], timeout: float, what: str) -> T:
        """Poll ``predicate`` (every 0.2 s) until it returns something truthy."""
        return wait_for(predicate, timeout, what, every=0.2)

    def node_ready(self, name: str) -> bool:
        try:
            node = self.core.read_node(name)
        except client.ApiException:
            return False
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        blocking = [t for t in node.spec.taints or [] if t.effect in ("NoSchedule", "NoExecute")]
        return ready and not blocking

    def create_namespace(self, name: str, timeout: float = 60) -> str:
        """Create a namespace and wait for its ``default`` ServiceAccount (pods need it)."""
        with contextlib.suppress(client.ApiException):
            self.core.create_namespace({"metadata": {"name": name}})

        def has_sa() -> bool:
            try:
                self.core.read_namespaced_service_account("default", name)
                return True
            except client.ApiException:
                return False

        self.wait_for(has_sa, timeout, f"default ServiceAccount in {name}")
        return name

    def pod(self, namespace: str, name: str) -> client.V1Pod | None:
        try:
            return self.core.read_namespaced_pod(name, namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def wait_for_pod_phase(
        self, namespace: str, name: str, phases: str | Iterable[str], timeout: float = 60
    ) -> client.V1Pod:
        wanted = {phases} if isinstance(phases, str) else set(phases)

        def check() -> client.V1Pod | None:
            pod = self.pod(namespace, name)
            return pod if pod is not None and pod.status.phase in wanted else None

        return self.wait_for(check, timeout, f"pod {namespace}/{name} in {sorted(wanted)}")

    def wait_for_pod_running(self, namespace: str, name: str, timeout: float = 60) -> client.V1Pod:
        """Phase Running and every container started."""

        def check() -> client.V1Pod | None:
            pod = self.pod(namespace, name)
            if pod is None or pod.status.phase != "Running":
                return None
            statuses = pod.status.container_statuses or []
            return pod if statuses and all(s.state.running for s in statuses) else None

        return self.wait_for(check, timeout, f"pod {namespace}/{name} running")

    def wait_for_pod_gone(self, namespace: str, name: str, timeout: float = 60) -> None:
        self.wait_for(
            lambda: self.pod(namespace, name) is None, timeout, f"{namespace}/{name} gone"
        )

    def logs(self, namespace: str, name: str, container: str | None = None) -> str:
        args = ["logs", "-n", namespace, name]
        if container:
            args += ["-c", container]
        return str(self.kubectl(*args).stdout)

    def wait_for_log(self, namespace: str, name: str, text: str, timeout: float = 60) -> str:
        """Wait until the pod's log contains ``text``; a container not started yet is no error."""

        def found() -> str | None:
            result = self.kubectl("logs", "-n", namespace, name, check=False)
            return str(result.stdout) if result.returncode == 0 and text in result.stdout else None

        return self.wait_for(found, timeout, f"{text!r} in {namespace}/{name}'s log")


def up_hook(cp: ControlPlane, state_dir: Path) -> Callable[[], None]:
    """``python -m tests.localcluster up --hook tests.localcluster.cluster:up_hook``:
    node agents + provisioner in the background daemon; returns its cleanup."""
    lc = LocalCluster(cp, state_dir / "cluster")
    lc.start()
    return lc.stop
