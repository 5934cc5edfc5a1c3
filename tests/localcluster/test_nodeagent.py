"""The local node agent: pure parts without a cluster, the rest on the session cluster."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from tuneop_contract import ENV_LOGICAL_CPU_DEVICES

from tests.forkserver import ENV_SWITCH as FORKSERVER_SWITCH
from tests.localcluster.cluster import LocalCluster, node_configs, wait_for
from tests.localcluster.nodeagent import podspec
from tests.localcluster.nodeagent.agent import NodeConfig, remove_mountpoints
from tests.localcluster.nodeagent.logserver import tail
from tests.localcluster.nodeagent.pods import LAUNCH_PY
from tests.localcluster.nodeagent.provisioner import persistent_volume
from tests.localcluster.python_pods import PY_SLEEP, create, python_pod, watch_until_deleted

# --- pure parts ----------------------------------------------------------------------


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "w-0",
            "namespace": "ns1",
            "uid": "u-1",
            "labels": {"app": "x", "role": "worker"},
        },
        "spec": {"nodeName": "gpu-node-0", "containers": [{"name": "c"}], **spec},
    }


def test_image_mapping_rule() -> None:
    env = {"DIR": "/ckpt"}
    assert podspec.container_argv({"command": ["python", "-m", "m", "$(DIR)"]}, env) == [
        sys.executable, "-m", "m", "/ckpt",
    ]  # fmt: skip
    assert podspec.container_argv({"command": ["python3.11"], "args": ["-c", "1"]}, env)[0] == (
        sys.executable
    )
    assert podspec.container_argv({"command": ["sh", "-c", "$$HOME $(NOPE)"]}, env) == [
        "sh", "-c", "$HOME $(NOPE)",
    ]  # fmt: skip
    trainer = {"image": "registry.local:5000/tuneop/trainer:0.1.0", "args": ["run"]}
    assert podspec.container_argv(trainer, env) == [sys.executable, "-m", "tuneop_trainer", "run"]
    assert podspec.container_argv({"image": "tuneop/trainer:0.1.0"}, env)[3:] == [
        "run", "--spec", "/etc/tuneop/spec.yaml", "--dir", "/checkpoints",
    ]  # fmt: skip
    assert podspec.container_argv({"image": "tuneop/operator"}, env)[1:] == ["-m", "tuneop"]
    assert podspec.container_argv({"image": "busybox"}, env) == ["sleep", "infinity"]
    assert podspec.image_name("docker.io/library/python:3.11@sha256:ab") == "python"


def test_container_env_resolves_downward_api_and_references() -> None:
    container = {
        "name": "c",
        "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "1Gi"}},
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "ADDR", "value": "$(IP):9464"},
            {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "p"}}},
            {
                "name": "OPT",
                "valueFrom": {"secretKeyRef": {"name": "nope", "key": "p", "optional": True}},
            },
            {
                "name": "MEM",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
            {"name": "PYTHONPATH", "value": "/user/code"},
        ],
    }
    pod = _pod(containers=[container])
    data = {("configmap", "cm"): {"k": "v"}, ("secret", "s"): {"p": "pw"}}
    env = podspec.container_env(
        pod, container, "127.0.1.7", "127.0.0.1", lambda kind, name: data.get((kind, name)),
        {"PATH": "/bin"},
    )  # fmt: skip
    assert env["POD"] == "w-0" and env["NS"] == "ns1" and env["UID"] == "u-1"
    assert env["ROLE"] == "worker" and env["NODE"] == "gpu-node-0"
    assert env["IP"] == "127.0.1.7" and env["ADDR"] == "127.0.1.7:9464"
    assert env["K"] == "v" and env["CM_k"] == "v" and env["S"] == "pw"
    assert "OPT" not in env and env["MEM"] == "1024"
    assert env[ENV_LOGICAL_CPU_DEVICES] == "2"
    assert env["PYTHONPATH"].split(":")[0] == "/user/code"
    assert str(Path(podspec.REPO_ROOT) / "contract") in env["PYTHONPATH"]
    with pytest.raises(LookupError):
        missing = {"name": "X", "valueFrom": {"secretKeyRef": {"name": "no", "key": "k"}}}
        podspec.container_env(pod, {"env": [missing]}, "", "", lambda kind, name: None, {})


def test_hosts_file_has_headless_service_names() -> None:
    pod = _pod(hostname="worker-0", subdomain="job")
    peer = _pod(hostname="worker-1", subdomain="job")
    text = podspec.hosts_file(pod, "127.0.1.2", [("127.0.1.3", podspec.dns_names(peer))])
    lines = text.splitlines()
    assert "127.0.0.1\tlocalhost" in lines
    assert "127.0.1.2\tworker-0.job.ns1.svc.cluster.local worker-0.job.ns1.svc worker-0" in lines
    assert (
        "127.0.1.3\tworker-1.job.ns1.svc.cluster.local worker-1.job.ns1.svc worker-1.job" in lines
    )
    assert podspec.dns_names(_pod()) == []


def test_quantities_and_node_list() -> None:
    assert podspec.quantity("500m") == 0.5
    assert podspec.quantity("2Gi") == 2 * 2**30
    assert podspec.gpu_count(_pod(containers=[{"resources": {"limits": {"nvidia.com/gpu": 3}}}]))
    assert [c.name for c in node_configs("")] == ["gpu-node-0"]
    nodes = node_configs("a:2, b")
    assert [(n.name, n.gpus) for n in nodes] == [("a", 2), ("b", 4)]
    assert tail(b"1\n2\n3\n", 2) == b"2\n3\n"


def test_local_path_volume_is_prebound_to_the_claim(tmp_path: Path) -> None:
    pvc = {
        "metadata": {"name": "data", "namespace": "ns1", "uid": "abc"},
        "spec": {"storageClassName": "local-path", "resources": {"requests": {"storage": "2Gi"}}},
    }
    pv = persistent_volume(pvc, tmp_path, "Retain")
    assert pv["metadata"]["name"] == "pvc-abc"
    assert pv["spec"]["local"]["path"] == str(tmp_path / "pvc-abc")
    assert pv["spec"]["claimRef"] == {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ns1",
        "name": "data", "uid": "abc",
    }  # fmt: skip
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"


def test_launcher_mounts_privately_and_execs(tmp_path: Path) -> None:
    """The launcher's bind mounts exist for the container only, and exec keeps the pid."""
    volume = tmp_path / "vol"
    volume.mkdir()
    (volume / "f").write_text("data")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.1.9\tmy-pod\n")
    target = tmp_path / "mnt" / "deep"
    created = tmp_path / "created"
    script = (
        "import os; print(open(os.environ['T'] + '/f').read(), open('/etc/hosts').read().strip(),"
        " os.getpid(), os.getcwd(), flush=True)"
    )
    spec = {
        "argv": ["python3", "-c", script],
        "env": {"PATH": "/usr/bin:/bin", "T": str(target)},
        "workingDir": str(tmp_path),
        "hostname": "my-pod",
        "mounts": [
            {"source": str(volume), "target": str(target), "readOnly": True},
            {"source": str(hosts), "target": "/etc/hosts"},
        ],
        "createdPaths": str(created),
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.Popen(
        [sys.executable, "-S", str(LAUNCH_PY), str(tmp_path / "spec.json")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    data, host_line, pid, cwd = out.split()[0], out.split("\n")[0], out.split()[-2], out.split()[-1]
    assert data == "data" and "127.0.1.9\tmy-pod" in host_line
    assert int(pid) == proc.pid and cwd == str(tmp_path)
    assert not (target / "f").exists(), "the bind mount leaked out of the namespace"
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    assert created.read_text().split() == [str(tmp_path / "mnt"), str(target)]


def test_launcher_resolves_sources_before_an_earlier_mount_hides_them(tmp_path: Path) -> None:
    """A volume mounted over a directory (a pod's /tmp emptyDir, say) must not hide the
    host paths that later volumes come from: the launcher opens every source first."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "hosts").write_text("127.0.1.7\tother-pod\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    created = work / "created"
    script = "print(open('/etc/hosts').read().strip(), flush=True)"
    spec = {
        "argv": ["python3", "-c", script],
        "env": {"PATH": "/usr/bin:/bin"},
        "workingDir": "/",
        "mounts": [
            {"source": str(empty), "target": str(work)},  # hides work/hosts from here on
            {"source": str(work / "hosts"), "target": "/etc/hosts"},
        ],
        "createdPaths": str(created),
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run(
        [sys.executable, "-S", str(LAUNCH_PY), str(tmp_path / "spec.json")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "127.0.1.7\tother-pod"
    assert created.read_text() == ""  # every mount point already existed


def test_mountpoints_still_mounted_elsewhere_are_kept(tmp_path: Path) -> None:
    """Removing a mount point detaches it in every namespace (e.g. another local
    cluster's pod on this machine), so cleanup keeps the ones still in use."""
    source, used, unused = tmp_path / "src", tmp_path / "used", tmp_path / "unused"
    for path in (source, used, unused):
        path.mkdir()
    listing = tmp_path / "created"
    listing.write_text(f"{used}\n{unused}\n")
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount --bind {source} {used} && echo mounted && exec sleep 60"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "mounted"
        remove_mountpoints(listing)
        assert used.exists() and not unused.exists()
    finally:
        holder.kill()
        holder.wait()
    listing.write_text(f"{used}\n")
    remove_mountpoints(listing)
    assert not used.exists()


# --- on the session cluster ------------------------------------------------------------


@pytest.mark.cluster
def test_node_registered_with_gpus_lease_and_logs_port(cluster: LocalCluster) -> None:
    node = cluster.core.read_node("gpu-node-0")
    assert node.status.capacity["nvidia.com/gpu"] == "4"
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    assert node.status.daemon_endpoints.kubelet_endpoint.port == cluster.node().logs.port  # type: ignore[union-attr]
    lease = client.CoordinationV1Api(cluster.api).read_namespaced_lease(
        "gpu-node-0", "kube-node-lease"
    )
    assert lease.spec.holder_identity == "gpu-node-0"
    sc = client.StorageV1Api(cluster.api).read_storage_class("local-path")
    assert sc.metadata.annotations["storageclass.kubernetes.io/is-default-class"] == "true"


@pytest.mark.cluster
@pytest.mark.parametrize("start", ["forked", "fresh"])
def test_pod_env_volumes_status_and_logs(cluster: LocalCluster, start: str) -> None:
    """Downward API, ConfigMap/Secret volumes, GPU → logical CPU devices, per-pod IP and
    hostname, termination message, exit code, restartPolicy OnFailure, kubectl logs; the
    same for a container forked from the agent's Python fork server (TensorFlow already
    imported) and for one that sets a value read at interpreter start (a fresh one)."""
    ns = cluster.create_namespace(f"agent-basics-{start}")
    cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    cluster.core.create_namespaced_secret(
        ns, {"metadata": {"name": "sec"}, "stringData": {"pw": "s3cret"}}
    )
    script = """
        import os, socket, sys
        print("env", os.environ["POD"], os.environ["IP"], os.environ["TUNEOP_LOGICAL_CPU_DEVICES"])
        print("cfg", open("/etc/cfg/a").read(), open("/etc/sec/pw").read())
        print("labels", open("/etc/info/labels").read().replace(chr(10), ","))
        print("host", socket.gethostname(), open("/etc/hosts").read().count(os.environ["IP"]))
        print("init said", open("/scratch/init").read())
        print("forked", "tensorflow" in sys.modules, os.getpgid(0) == os.getpid(), os.getcwd())
        marker = "/scratch/ran-once"
        if not os.path.exists(marker):
            open(marker, "w").close()
            open("/dev/termination-log", "w").write("first run fails")
            print("first run")
            sys.exit(3)
        open("/dev/termination-log", "w").write("all good")
        print("second run")
    """
    body = python_pod(
        "basics",
        script,
        restartPolicy="OnFailure",
        initContainers=[
            {
                "name": "init",
                "image": "busybox",
                "command": ["sh", "-c", "echo hello > /scratch/init"],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }
        ],
        container={
            "env": [
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                *([{"name": "PYTHONHASHSEED", "value": "0"}] if start == "fresh" else []),
            ],
            "workingDir": "/scratch",
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
            "volumeMounts": [
                {"name": "cfg", "mountPath": "/etc/cfg"},
                {"name": "sec", "mountPath": "/etc/sec", "readOnly": True},
                {"name": "info", "mountPath": "/etc/info"},
                {"name": "scratch", "mountPath": "/scratch"},
            ],
        },
        volumes=[
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "sec", "secret": {"secretName": "sec"}},
            {
                "name": "info",
                "downwardAPI": {
                    "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
                },
            },
            {"name": "scratch", "emptyDir": {}},
        ],
    )
    create(cluster, ns, body)
    pod = cluster.wait_for_pod_phase(ns, "basics", "Succeeded", timeout=90)
    ip = pod.status.pod_ip
    assert ip.startswith(cluster.node().pod_net) and ip != "127.0.0.1"
    status = pod.status.container_statuses[0]
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 3
    assert status.last_state.terminated.message == "first run fails"
    assert status.state.terminated.exit_code == 0
    assert status.state.terminated.reason == "Completed"
    assert status.state.terminated.message == "all good"
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["Initialized"] == "True" and conditions["Ready"] == "False"
    logs = cluster.logs(ns, "basics")
    assert f"env basics {ip} 1" in logs
    assert "cfg 1 s3cret" in logs
    assert 'test="basics"' in logs
    assert "host basics 1" in logs
    assert "init said hello" in logs and "second run" in logs and "first run" not in logs
    forks = start == "forked" and os.environ.get(FORKSERVER_SWITCH, "1") != "0"
    assert f"forked {forks} True /scratch" in logs  # its own session, in its workingDir
    previous = cluster.kubectl("logs", "-n", ns, "basics", "--previous").stdout
    assert "first run" in previous and "second run" not in previous
    assert pod.status.init_container_statuses[0].state.terminated.exit_code == 0
    # tailLines through the API server's proxy to the kubelet port
    tail_out = cluster.kubectl("logs", "-n", ns, "basics", "-c", "main", "--tail=2").stdout
    assert tail_out.splitlines() == [logs.splitlines()[-2], "second run"]


@pytest.mark.cluster
def test_pvc_data_survives_pod_deletion(cluster: LocalCluster) -> None:
    ns = cluster.create_namespace("agent-pvc")
    cluster.core.create_namespaced_persistent_volume_claim(
        ns,
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    mount = {"volumeMounts": [{"name": "data", "mountPath": "/checkpoints"}]}
    writer = "open('/checkpoints/hello', 'w').write('kept')\nprint('wrote', flush=True)"
    create(cluster, ns, python_pod("writer", writer, container=mount, volumes=[volume]))
    cluster.wait_for_pod_phase(ns, "writer", "Succeeded", timeout=90)
    cluster.core.delete_namespaced_pod("writer", ns)
    cluster.wait_for_pod_gone(ns, "writer")
    reader = "print('read', open('/checkpoints/hello').read(), flush=True)"
    create(cluster, ns, python_pod("reader", reader, container=mount, volumes=[volume]))
    cluster.wait_for_pod_phase(ns, "reader", "Succeeded", timeout=90)
    assert "read kept" in cluster.logs(ns, "reader")
    pvc = cluster.core.read_namespaced_persistent_volume_claim("data", ns)
    pv = cluster.core.read_persistent_volume(pvc.spec.volume_name)
    assert pv.spec.storage_class_name == "local-path"
    assert Path(pv.spec.local.path, "hello").read_text() == "kept"
    assert Path(pv.spec.local.path).is_relative_to(cluster.workdir)
    # reclaimPolicy Delete (the StorageClass's): claim deleted → PV and directory removed
    cluster.core.delete_namespaced_pod("reader", ns)
    cluster.wait_for_pod_gone(ns, "reader")
    cluster.core.delete_namespaced_persistent_volume_claim("data", ns)

    def pv_gone() -> bool:
        try:
            cluster.core.read_persistent_volume(pv.metadata.name)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    cluster.wait_for(pv_gone, 60, "the released PV deleted")
    assert not Path(pv.spec.local.path).exists()


@pytest.mark.cluster
def test_kubectl_logs_follow_streams_until_the_container_exits(cluster: LocalCluster) -> None:
    ns = cluster.create_namespace("agent-follow")
    script = """
        import time
        print("started", flush=True)
        for i in range(3):
            time.sleep(0.5)
            print("line", i, flush=True)
    """
    create(cluster, ns, python_pod("talker", script))
    cluster.wait_for_log(ns, "talker", "started", 60)
    followed = cluster.kubectl("logs", "-f", "-n", ns, "talker").stdout
    assert followed.splitlines() == ["started", "line 0", "line 1", "line 2"]


@pytest.mark.cluster
def test_deletion_sends_sigterm_then_sigkill_after_grace(cluster: LocalCluster) -> None:
    ns = cluster.create_namespace("agent-delete")
    graceful = """
        import signal, sys, time
        def stop(*_):
            print("got SIGTERM", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print("started", flush=True)
        while True: time.sleep(0.1)
    """
    stubborn = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("started", flush=True)
        while True: time.sleep(0.1)
    """
    create(cluster, ns, python_pod("graceful", graceful, terminationGracePeriodSeconds=60))
    create(cluster, ns, python_pod("stubborn", stubborn, terminationGracePeriodSeconds=1))
    finals = {}
    for name in ("graceful", "stubborn"):
        cluster.wait_for_log(ns, name, "started", 60)
    for name in ("graceful", "stubborn"):
        rv = cluster.core.read_namespaced_pod(name, ns).metadata.resource_version
        result: dict[str, Any] = {}
        thread = threading.Thread(
            target=lambda n=name, r=rv, out=result: out.update(
                watch_until_deleted(cluster, ns, n, r)
            )
        )
        thread.start()
        cluster.core.delete_namespaced_pod(name, ns)
        thread.join(90)
        finals[name] = result
    graceful_state = finals["graceful"]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert graceful_state["exitCode"] == 0  # exited by itself on SIGTERM, before the grace
    assert finals["graceful"]["status"]["phase"] == "Succeeded"
    stubborn_state = finals["stubborn"]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert stubborn_state["exitCode"] == 137  # SIGKILLed after its 1 s grace
    assert finals["stubborn"]["status"]["phase"] == "Failed"


@pytest.mark.cluster
def test_deployment_pod_runs_and_owner_deletion_collects_it(cluster: LocalCluster) -> None:
    ns = cluster.create_namespace("agent-deploy")
    labels = {"app": "sleeper"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sleeper", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "main", "image": "tuneop/pause"}],
                },
            },
        },
    }
    cluster.apply(deployment)

    def running_pod() -> str | None:
        pods = cluster.core.list_namespaced_pod(ns, label_selector="app=sleeper").items
        for pod in pods:
            if pod.status.phase == "Running" and pod.status.container_statuses[0].ready:
                return str(pod.metadata.name)
        return None

    name = cluster.wait_for(running_pod, 90, "the Deployment's pod running")
    owner = cluster.core.read_namespaced_pod(name, ns).metadata.owner_references[0]
    assert owner.kind == "ReplicaSet"
    cluster.kubectl("delete", "deployment", "sleeper", "-n", ns, "--cascade=background")
    cluster.wait_for_pod_gone(ns, name, timeout=90)


@pytest.mark.cluster
def test_service_account_token_is_subject_to_rbac(cluster: LocalCluster) -> None:
    """In-cluster config from the projected token: the Role's grant works, the rest is 403."""
    ns = cluster.create_namespace("agent-rbac")
    cluster.core.create_namespaced_config_map(
        ns, {"metadata": {"name": "allowed"}, "data": {"k": "v"}}
    )
    cluster.core.create_namespaced_service_account(ns, {"metadata": {"name": "limited"}})
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "read-one", "namespace": ns},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": ["allowed"],
                    "verbs": ["get"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "read-one", "namespace": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "read-one",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "limited", "namespace": ns}],
        },
    )
    script = """
        from kubernetes import client, config
        config.load_incluster_config()
        v1 = client.CoreV1Api()
        ns = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
        print("configmap", v1.read_namespaced_config_map("allowed", ns).data["k"], flush=True)
        for call in (lambda: v1.list_namespaced_secret(ns),
                     lambda: v1.read_namespaced_config_map("other", ns)):
            try:
                call()
                print("unexpectedly allowed", flush=True)
            except client.ApiException as exc:
                print("refused", exc.status, flush=True)
    """
    create(cluster, ns, python_pod("rbac", script, serviceAccountName="limited"))
    cluster.wait_for_pod_phase(ns, "rbac", ("Succeeded", "Failed"), timeout=90)
    logs = cluster.logs(ns, "rbac")
    assert "configmap v" in logs
    assert logs.count("refused 403") == 2, logs
    assert "unexpectedly allowed" not in logs
    # The agent refreshes projected tokens (at 80 % of their lifetime) in place.
    builder = cluster.node().worker(ns, "rbac").builder  # type: ignore[union-attr]
    token_file, _, seconds = builder.tokens[0]
    assert seconds == 3607
    before = token_file.read_text()
    builder.refresh_tokens()
    assert token_file.read_text() not in ("", before)


@pytest.mark.cluster
def test_headless_service_names_resolve_to_pod_ips(cluster: LocalCluster) -> None:
    ns = cluster.create_namespace("agent-dns")
    cluster.core.create_namespaced_service(
        ns,
        {
            "metadata": {"name": "workers"},
            "spec": {"clusterIP": "None", "selector": {"job": "dns"}, "ports": [{"port": 2222}]},
        },
    )
    target = f"w1.workers.{ns}.svc.cluster.local"
    resolver = f"""
        import socket, time
        for _ in range(200):
            try:
                print("resolved", socket.gethostbyname("{target}"), flush=True)
                break
            except OSError:
                time.sleep(0.1)
    """
    create(cluster, ns, python_pod("w0", resolver, hostname="w0", subdomain="workers",
                                   labels={"job": "dns"}))  # fmt: skip
    create(cluster, ns, python_pod("w1", PY_SLEEP, hostname="w1", subdomain="workers",
                                   labels={"job": "dns"}))  # fmt: skip
    w1 = cluster.wait_for_pod_running(ns, "w1")
    cluster.wait_for_pod_phase(ns, "w0", "Succeeded", timeout=60)
    assert f"resolved {w1.status.pod_ip}" in cluster.logs(ns, "w0")
    cluster.core.delete_namespaced_pod("w1", ns, grace_period_seconds=0)


@pytest.mark.cluster
def test_stopped_node_leaves_no_process_or_mount(cluster: LocalCluster) -> None:
    agent = cluster.add_node(NodeConfig(name="scratch-node", gpus=0))
    ns = cluster.create_namespace("agent-scratch")
    body = python_pod(
        "busy",
        PY_SLEEP,
        nodeSelector={"kubernetes.io/hostname": "scratch-node"},
        container={"volumeMounts": [{"name": "tmp", "mountPath": "/tuneop-scratch-mnt/x"}]},
        volumes=[{"name": "tmp", "emptyDir": {}}],
    )
    create(cluster, ns, body)
    cluster.wait_for_pod_running(ns, "busy")
    # Running once launched; the marker is in the environment once launch.py execs
    wait_for(agent.live_processes, 30, "the pod's process found by its environment marker")
    cluster.remove_node("scratch-node")
    agent.cleanup_mountpoints()
    assert not Path("/tuneop-scratch-mnt").exists()
    assert agent.live_processes() == []
    assert [line for line in cluster.leftovers() if "scratch-node" in line] == []
    assert not (agent.workdir / "pods").exists() or not any((agent.workdir / "pods").iterdir())


@pytest.mark.cluster
def test_pods_listen_on_the_same_wildcard_port(cluster: LocalCluster) -> None:
    """The bind shim: 0.0.0.0:<port> in a pod means the pod's own IP, as with real pods."""
    if cluster.node().bind_shim is None:
        pytest.skip("no C compiler to build the bind shim")  # documented degradation
    ns = cluster.create_namespace("agent-ports")
    server = """
        import os, socket
        s = socket.socket()
        s.bind(("0.0.0.0", 47001))
        s.listen()
        print("started", s.getsockname()[0], flush=True)
        while True:
            conn, _ = s.accept()
            conn.sendall(os.environ["HOSTNAME"].encode())
            conn.close()
    """
    for name in ("srv-a", "srv-b"):
        create(cluster, ns, python_pod(name, server))
    for name in ("srv-a", "srv-b"):
        cluster.wait_for_log(ns, name, "started", 60)
        ip = cluster.core.read_namespaced_pod(name, ns).status.pod_ip
        assert f"started {ip}" in cluster.logs(ns, name)
        with socket.create_connection((ip, 47001), timeout=10) as conn:
            assert conn.recv(100) == name.encode()
        cluster.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


@pytest.mark.cluster
@pytest.mark.slow
def test_multi_worker_tf_config_with_dns_names(cluster: LocalCluster) -> None:
    """Two pods behind a headless Service run MultiWorkerMirroredStrategy on the same
    port, finding each other by DNS name (hosts files) at their own IPs (bind shim)."""
    ns = cluster.create_namespace("agent-mwms")
    cluster.core.create_namespaced_service(
        ns,
        {
            "metadata": {"name": "mw"},
            "spec": {"clusterIP": "None", "selector": {"job": "mw"}, "ports": [{"port": 23456}]},
        },
    )
    script = """
        import json, os
        import tensorflow as tf
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]

        @tf.function
        def step():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce("sum", tf.constant(float(index) + 1.0))

        result = strategy.experimental_local_results(strategy.run(step))[0]
        print("replicas", strategy.num_replicas_in_sync, "sum", float(result), flush=True)
    """
    workers = [f"w{i}.mw.{ns}.svc:23456" for i in range(2)]
    for i in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
        env = [
            {"name": "TF_CONFIG", "value": json.dumps(tf_config)},
            {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
        ]
        body = python_pod(f"w{i}", script, hostname=f"w{i}", subdomain="mw",
                          labels={"job": "mw"}, container={"env": env})  # fmt: skip
        create(cluster, ns, body)
    for i in range(2):
        pod = cluster.wait_for_pod_phase(ns, f"w{i}", ("Succeeded", "Failed"), timeout=300)
        logs = cluster.logs(ns, f"w{i}")
        assert pod.status.phase == "Succeeded", logs[-2000:]
        assert "replicas 2 sum 3.0" in logs


@pytest.mark.cluster
def test_missing_config_map_key_waits_then_starts(cluster: LocalCluster) -> None:
    ns = cluster.create_namespace("agent-config-error")
    env = [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "late", "key": "v"}}}]
    create(cluster, ns, python_pod("waiter", "import os; print('v', os.environ['V'])",
                                   container={"env": env}))  # fmt: skip

    def config_error() -> Any:
        pod = cluster.pod(ns, "waiter")
        statuses = (pod.status.container_statuses or []) if pod else []
        waiting = statuses[0].state.waiting if statuses else None
        return pod if waiting and waiting.reason == "CreateContainerConfigError" else None

    pod = cluster.wait_for(config_error, 60, "CreateContainerConfigError")
    assert pod.status.phase == "Pending"
    late = {"metadata": {"name": "late"}, "data": {"v": "1"}}
    cluster.core.create_namespaced_config_map(ns, late)
    cluster.wait_for_pod_phase(ns, "waiter", "Succeeded")
    assert "v 1" in cluster.logs(ns, "waiter")
