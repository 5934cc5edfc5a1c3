"""Pure helpers of the node agent (test infrastructure): pod spec in, process plan out.

Pods are plain dicts (the API's camelCase JSON, e.g. from ``ApiClient.sanitize_for_serialization``
or ``kubectl get -o json``); nothing here talks to the API server, so it is unit-tested
without a cluster.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tuneop_contract import ENV_LOGICAL_CPU_DEVICES

REPO_ROOT = Path(__file__).resolve().parents[3]
REPO_PYTHONPATH = [
    str(REPO_ROOT / "contract"),
    str(REPO_ROOT / "operator"),
    str(REPO_ROOT / "trainer_image"),
    str(REPO_ROOT),
]
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"

IMAGE_ENTRYPOINTS: dict[str, tuple[list[str], list[str]]] = {
    # image name: (ENTRYPOINT, CMD) of its Dockerfile
    "tuneop/trainer": (
        ["python", "-m", "tuneop_trainer"],
        ["run", "--spec", "/etc/tuneop/spec.yaml", "--dir", "/checkpoints"],
    ),
    "tuneop/operator": (["python", "-m", "tuneop"], []),
}
"""Entry point and default args of a container without ``command``, by image name (tag
and registry ignored), mirroring the Dockerfiles. Images not listed run
``sleep infinity``, like a pause container."""
IMAGE_WORKDIRS: dict[str, str] = {"tuneop/trainer": "/home/tuneop"}
"""The WORKDIR of an image's Dockerfile, by image name, where the image makes it writable
for its user: a container without ``workingDir`` starts there, in a fresh directory of
its own (as a container's writable layer is). Other images start in ``/``."""
PAUSE_ARGV = ["sleep", "infinity"]
MODULE_ENV = "LOCALCLUSTER_PYTHON_MODULE"
"""Container env naming a module that replaces the container's ``python -m`` module:
how a test or benchmark opts one job into a stand-in program (through the TuningJob's
spec.env) while the other pods of the cluster run the real trainer."""

PYTHON_NAME = re.compile(r"^python(3(\.\d+)?)?$")


def image_name(image: str) -> str:
    """``docker.io/tuneop/trainer:0.1.0`` → ``tuneop/trainer``."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    if parts and parts[0] == "library":
        parts = parts[1:]
    return "/".join(parts)


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The local command line for a container (the image mapping rule).

    ``command`` + ``args`` with ``$(VAR)`` expanded from the container env; without a
    command, the image's entry point from :data:`IMAGE_ENTRYPOINTS` + ``args`` (or the
    image's default args if the container has none), else ``sleep infinity``. A leading
    ``python``/``python3``/``python3.X`` becomes ``sys.executable`` (the repo virtualenv);
    with :data:`MODULE_ENV` in the container env, ``python -m M`` runs that module instead
    (a stand-in program, e.g. tests.localcluster.standin_trainer)."""
    command = [expand(c, env) for c in container.get("command") or []]
    args = [expand(a, env) for a in container.get("args") or []]
    if not command:
        image = IMAGE_ENTRYPOINTS.get(image_name(str(container.get("image") or "")))
        if image is None:
            return list(PAUSE_ARGV)
        command = list(image[0])
        if "args" not in container:
            args = list(image[1])
    argv = command + args
    if PYTHON_NAME.match(argv[0]):
        argv[0] = sys.executable
        if env.get(MODULE_ENV) and len(argv) > 2 and argv[1] == "-m":
            argv[2] = env[MODULE_ENV]
    return argv


_VAR = re.compile(r"\$\((\w+)\)|\$\$")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names replaced, ``$$`` → ``$``, unknown kept."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR.sub(sub, value)


def field_value(pod: Mapping[str, Any], path: str, pod_ip: str, host_ip: str) -> str:
    """Value of a downward-API ``fieldRef.fieldPath`` for this pod."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path])
    for kind in ("labels", "annotations"):
        values = meta.get(kind) or {}
        if path == f"metadata.{kind}":
            return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
        match = re.fullmatch(rf"metadata\.{kind}\['([^']*)'\]", path)
        if match:
            return str(values.get(match.group(1), ""))
    raise ValueError(f"unsupported fieldPath {path!r}")


def quantity(value: str | int | float) -> float:
    """A Kubernetes resource quantity as a number (``500m`` → 0.5, ``2Gi`` → 2**31)."""
    text = str(value).strip()
    suffixes = {
        "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
        "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
        "P": 1e15, "E": 1e18,
    }  # fmt: skip
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * suffixes[suffix]
    return float(text)


def resource_field_value(container: Mapping[str, Any], resource: str, divisor: str) -> str:
    """``resourceFieldRef`` (limits.cpu, requests.memory, ...): ceil(value / divisor)."""
    section, _, name = resource.partition(".")
    value = ((container.get("resources") or {}).get(section) or {}).get(name)
    if value is None:
        return "0"
    div = quantity(divisor or "1")
    result = quantity(value) / div
    return str(int(-(-result // 1)))


def gpu_count(pod: Mapping[str, Any]) -> int:
    """The pod's ``nvidia.com/gpu`` limit, summed over its containers."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(quantity(limits.get(GPU_RESOURCE, 0)))
    return total


Lookup = Callable[[str, str], "dict[str, str] | None"]
"""(kind, name) → data of a ConfigMap ("configmap") or Secret ("secret", decoded), or
None if it does not exist."""


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    pod_ip: str,
    host_ip: str,
    lookup: Lookup,
    base: Mapping[str, str],
) -> dict[str, str]:
    """The process environment of a container, as the kubelet would build it.

    ``base`` (PATH, HOME, KUBERNETES_SERVICE_HOST/PORT, ...) first, then envFrom, then
    env (later wins, ``$(VAR)`` expanded against what is defined so far). Adds
    ``TUNEOP_LOGICAL_CPU_DEVICES`` (the pod's GPU limit) unless the pod sets it, and the
    repository on PYTHONPATH after any PYTHONPATH the pod sets."""
    env: dict[str, str] = dict(base)
    gpus = gpu_count(pod)
    if gpus:
        env[ENV_LOGICAL_CPU_DEVICES] = str(gpus)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("configmap", "configMapRef"), ("secret", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            data = lookup(kind, ref["name"])
            if data is None:
                if ref.get("optional"):
                    continue
                raise LookupError(f"{kind} {ref['name']!r} not found")
            for name, value in data.items():
                env[prefix + name] = value
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        value_from = var["valueFrom"]
        if "fieldRef" in value_from:
            env[name] = field_value(pod, value_from["fieldRef"]["fieldPath"], pod_ip, host_ip)
        elif "resourceFieldRef" in value_from:
            ref = value_from["resourceFieldRef"]
            target = container
            if ref.get("containerName"):
                target = next(
                    c for c in pod["spec"]["containers"] if c["name"] == ref["containerName"]
                )
            env[name] = resource_field_value(target, ref["resource"], ref.get("divisor", "1"))
        else:
            for kind, key in (("configmap", "configMapKeyRef"), ("secret", "secretKeyRef")):
                ref = value_from.get(key)
                if ref is None:
                    continue
                data = lookup(kind, ref["name"])
                if data is None or ref["key"] not in data:
                    if ref.get("optional"):
                        break
                    raise LookupError(f"{kind} {ref['name']!r} key {ref['key']!r} not found")
                env[name] = data[ref["key"]]
    own = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join([p for p in own.split(os.pathsep) if p] + REPO_PYTHONPATH)
    return env


def pod_hostname(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("hostname") or pod["metadata"]["name"])[:63]


def dns_names(pod: Mapping[str, Any], cluster_domain: str = "cluster.local") -> list[str]:
    """Names under which a pod with hostname+subdomain resolves (headless Service)."""
    spec = pod.get("spec") or {}
    subdomain = spec.get("subdomain")
    if not subdomain:
        return []
    host = pod_hostname(pod)
    ns = pod["metadata"]["namespace"]
    base = f"{host}.{subdomain}.{ns}.svc"
    return [f"{base}.{cluster_domain}", base, f"{host}.{subdomain}"]


def hosts_file(
    pod: Mapping[str, Any],
    pod_ip: str,
    peers: Iterable[tuple[str, list[str]]],
) -> str:
    """The /etc/hosts of a pod: localhost, the pod's own names, then ``peers``
    (ip, names) for pods behind headless Services (see :func:`dns_names`)."""
    own = dns_names(pod)
    lines = [
        "# Kubernetes-managed hosts file (tuneop local node agent).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{pod_ip}\t" + " ".join([*own[:2], pod_hostname(pod)]),
    ]
    for ip, names in sorted(peers):
        names = [n for n in names if n not in own]
        if names:
            lines.append(f"{ip}\t" + " ".join(names))
    return "\n".join(lines) + "\n"


def restart_wanted(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def exit_reason(exit_code: int) -> str:
    """containerStatuses[].state.terminated.reason: a SIGKILL is Error, as the kubelet
    reports one the kernel's OOM killer did not send (the agent has no memory limit;
    OOMKilled comes from real nodes' cgroups)."""
    return "Completed" if exit_code == 0 else "Error"


def mount_order(mounts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parents before children, so a volume mounted inside another one stays visible."""
    return sorted(mounts, key=lambda m: (m["target"].rstrip("/").count("/"), m["target"]))


def image_workdir(container: dict[str, Any]) -> str | None:
    """The image's writable WORKDIR (:data:`IMAGE_WORKDIRS`) if the container sets no
    ``workingDir``."""
    if container.get("workingDir"):
        return None
    return IMAGE_WORKDIRS.get(image_name(str(container.get("image") or "")))
