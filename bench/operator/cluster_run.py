"""A fresh local cluster with the CRDs and the operator (a subprocess) for one benchmark
run, torn down after: what the operator benchmarks start from."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hack.images import image_tag
from tests.e2e.harness import Kubectl, Operator, wait_for
from tests.localcluster.cluster import LocalCluster
from tests.localcluster.controlplane import ControlPlane
from tests.localcluster.kubelet.node import real_node_config


@dataclasses.dataclass
class Run:
    cluster: LocalCluster
    kubectl: Kubectl
    spec: dict[str, Any]  # TuningJob spec fields the node kind needs (the CPU image)


def _nodes(
    cp: ControlPlane, work: Path, real_node: bool, fork_python: bool
) -> tuple[LocalCluster, dict[str, Any]]:
    if not real_node:
        # fork_python off by default: a trainer's real start (the suite's lane forks)
        cluster = LocalCluster(cp, work / "cluster", fork_python=fork_python)
        cluster.start()
        return cluster, {}
    cluster = LocalCluster(cp, work / "cluster", nodes=[])
    cluster.start()
    cluster.add_real_node(real_node_config("trainer-cpu", name="gpu-node-0", taints=[]))
    return cluster, {"image": f"tuneop/trainer:{image_tag()}-cpu"}


@contextlib.contextmanager
def cluster_with_operator(
    namespace: str, real_node: bool = False, fork_python: bool = False
) -> Iterator[Run]:
    """One node `gpu-node-0` (the node agent's, or a real one), the operator running, and
    `namespace` ready for pods. `fork_python`: the node agent forks trainers from a
    process with TensorFlow imported, as in the suite."""
    work = Path(tempfile.mkdtemp(prefix="tuneop-bench-"))
    cp = ControlPlane(work / "controlplane")
    cluster: LocalCluster | None = None
    operator: Operator | None = None
    try:
        cp.start()
        cluster, spec = _nodes(cp, work, real_node, fork_python)
        kubectl = Kubectl(cp.bin_dir / "kubectl", cp.kubeconfig)
        kubectl.install_crds()
        operator = Operator(cp.kubeconfig, work / "operator.log").start()
        wait_for(
            lambda: (
                kubectl("get", "cm", "kube-root-ca.crt", "-n", namespace, check=False).returncode
                == 0
            ),
            60,
            "kube-root-ca.crt",
        )
        yield Run(cluster, kubectl, spec)
    finally:
        if operator is not None:
            operator.stop()
        if cluster is not None:
            cluster.stop()
        cp.stop()
        shutil.rmtree(work, ignore_errors=True)
