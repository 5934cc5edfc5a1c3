"""The pod network of a real node: a CNI bridge on a private subnet (test infrastructure).

containerd makes each pod's network namespace and calls Debian's CNI plugins: `bridge`
with `host-local` addresses and `loopback`. The bridge's gateway address is on the host,
so the host reaches every pod and pods reach each other. Traffic stays on this machine:
no masquerade, and the host does not forward (net.ipv4.ip_forward stays as it is, 0
here), so a pod's packet for any other address goes nowhere; pods get routes to the pod
supernet and the Service range only. Each node takes a /24 of its own inside
10.200.0.0/16, named by `subnet_index`, so nodes and clusters running at once never
share a pod address.

The API server from a pod: the kubelet gives every container KUBERNETES_SERVICE_HOST,
the `kubernetes` Service's cluster IP, and no kube-proxy runs here. What kube-proxy does
for that one Service, :func:`expose_apiserver` does with one DNAT rule from the node's
bridge to the API server on 127.0.0.1 (the bridge's `route_localnet` lets the kernel
route there), so the API server stays bound to loopback and only this node's pods reach
it through the bridge. Other Services' cluster IPs do not answer (the trainers use none).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

SUPERNET = "10.200"
SERVICE_RANGE = "10.96.0.0/16"  # the control plane's --service-cluster-ip-range
KUBERNETES_SERVICE = "10.96.0.1"  # the first address of that range


def subnet(index: int) -> str:
    return f"{SUPERNET}.{index % 256}.0/24"


def bridge_name(index: int) -> str:
    return f"tuneop{index % 256}"


def gateway(index: int) -> str:
    """The bridge's address on the host: the node's InternalIP (the kubelet listens
    there; the API server reaches it for logs, exec and port-forward)."""
    return f"{SUPERNET}.{index % 256}.1"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def create_bridge(index: int) -> None:
    """The bridge with its gateway address, made before the first pod (the CNI plugin
    would make it only then, and the kubelet needs its address at start)."""
    name = bridge_name(index)
    if _ip("link", "show", name, check=False).returncode != 0:
        _ip("link", "add", name, "type", "bridge")
    if gateway(index) not in _ip("-4", "addr", "show", name).stdout:
        _ip("addr", "add", f"{gateway(index)}/24", "dev", name)
    _ip("link", "set", name, "up")


def bridge_exists(index: int) -> bool:
    return _ip("link", "show", bridge_name(index), check=False).returncode == 0


def delete_bridge(index: int) -> None:
    _ip("link", "delete", bridge_name(index), check=False)


def bridge_conf(index: int) -> dict[str, Any]:
    """The CNI configuration list containerd reads for every pod of the node."""
    return {
        "cniVersion": "1.0.0",
        "name": f"tuneop-{index % 256}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge_name(index),
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet(index)}]],
                    "routes": [{"dst": f"{SUPERNET}.0.0/16"}, {"dst": SERVICE_RANGE}],
                },
            },
            {"type": "loopback"},
        ],
    }


def _dnat(index: int, apiserver_port: int) -> list[str]:
    return [
        "PREROUTING", "-i", bridge_name(index), "-d", f"{KUBERNETES_SERVICE}/32", "-p", "tcp",
        "--dport", "443", "-j", "DNAT", "--to-destination", f"127.0.0.1:{apiserver_port}",
    ]  # fmt: skip


def expose_apiserver(index: int, apiserver_port: int) -> None:
    """Pods of node `index` reach the API server at the `kubernetes` Service's address."""
    Path(f"/proc/sys/net/ipv4/conf/{bridge_name(index)}/route_localnet").write_text("1")
    rule = _dnat(index, apiserver_port)
    if subprocess.run(["iptables", "-t", "nat", "-C", *rule], capture_output=True).returncode:
        subprocess.run(["iptables", "-t", "nat", "-A", *rule], check=True, capture_output=True)


def hide_apiserver(index: int, apiserver_port: int) -> None:
    rule = _dnat(index, apiserver_port)
    while not subprocess.run(
        ["iptables", "-t", "nat", "-D", *rule], capture_output=True
    ).returncode:
        pass
