"""The local control plane is a real, secured Kubernetes API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.localcluster import tools
from tests.localcluster.controlplane import ControlPlane, KubectlError

pytestmark = pytest.mark.cluster

WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.test.tuneop.io}
spec:
  group: test.tuneop.io
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer, minimum: 1}
"""


def widget(name: str, replicas: int) -> str:
    return json.dumps(
        {
            "apiVersion": "test.tuneop.io/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas},
        }
    )


def test_readyz_answers_ok_through_kubectl(control_plane: ControlPlane) -> None:
    assert control_plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    version = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    pinned = control_plane.bin_dir.joinpath("versions.env").read_text()
    assert f"KUBERNETES_VERSION={version['serverVersion']['gitVersion']}" in pinned
    assert version["clientVersion"]["gitVersion"] == version["serverVersion"]["gitVersion"]


def test_schema_validation_rejects_an_invalid_custom_resource(
    control_plane: ControlPlane,
) -> None:
    control_plane.kubectl("apply", "-f", "-", input=WIDGET_CRD)
    control_plane.kubectl(
        "wait", "--for=condition=Established", "crd/widgets.test.tuneop.io", "--timeout=60s"
    )
    control_plane.kubectl("apply", "-f", "-", input=widget("good", 2))
    with pytest.raises(KubectlError) as err:
        control_plane.kubectl("apply", "-f", "-", input=widget("bad", 0))
    assert "spec.replicas" in err.value.stderr
    assert "should be greater than or equal to 1" in err.value.stderr
    names = control_plane.kubectl("get", "widgets", "-o", "name").stdout.split()
    assert names == ["widget.test.tuneop.io/good"]


def test_rbac_forbids_a_user_in_no_group_until_a_role_grants_it(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    cert, key = control_plane.issue_cert("jane", "jane", [], [], server=False)
    jane = control_plane.write_kubeconfig(tmp_path / "jane.kubeconfig", "jane", cert, key)
    whoami = json.loads(
        control_plane.kubectl("auth", "whoami", "-o", "json", kubeconfig=jane).stdout
    )
    assert whoami["status"]["userInfo"]["username"] == "jane"

    denied = control_plane.kubectl(
        "get", "configmaps", "-n", "default", kubeconfig=jane, check=False
    )
    assert denied.returncode != 0
    assert 'User "jane" cannot list resource "configmaps"' in denied.stderr

    control_plane.kubectl(
        "create", "role", "cm-reader", "-n", "default", "--verb=list", "--resource=configmaps"
    )
    control_plane.kubectl(
        "create", "rolebinding", "jane-cm-reader", "-n", "default", "--role=cm-reader",
        "--user=jane",
    )  # fmt: skip
    control_plane.kubectl("get", "configmaps", "-n", "default", kubeconfig=jane)
    still_denied = control_plane.kubectl(
        "get", "secrets", "-n", "default", kubeconfig=jane, check=False
    )
    assert "forbidden" in still_denied.stderr.lower()


def test_service_account_tokens_are_issued_and_accepted(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    token = control_plane.kubectl("create", "token", "default", "-n", "default").stdout.strip()
    sa = control_plane.write_kubeconfig(tmp_path / "sa.kubeconfig", "sa", token=token)
    whoami = json.loads(control_plane.kubectl("auth", "whoami", "-o", "json", kubeconfig=sa).stdout)
    assert whoami["status"]["userInfo"]["username"] == "system:serviceaccount:default:default"
    # The controller-manager's root-CA publisher is running: every namespace gets the CA.
    control_plane.kubectl("create", "namespace", "ca-check")
    ca = control_plane.kubectl(
        "wait", "--for=create", "configmap/kube-root-ca.crt", "-n", "ca-check", "--timeout=60s"
    )
    assert ca.returncode == 0


def test_an_etcd_restart_keeps_what_was_written_and_the_api_serves_again(
    control_plane: ControlPlane,
) -> None:
    """A crashed etcd member comes back on its data: what the API server acknowledged
    is there, and it takes writes again; no other component went down meanwhile."""
    control_plane.kubectl("create", "configmap", "before-etcd-restart", "-n", "default",
                          "--from-literal=k=v")  # fmt: skip
    pids = control_plane.alive
    # from a thread that ends right after, as a chaos fault's: the new etcd must not
    # die with it (PR_SET_PDEATHSIG follows the thread that forked)
    restart = threading.Thread(target=control_plane.restart_etcd, kwargs={"down_seconds": 2})
    restart.start()
    restart.join()
    time.sleep(1)
    kept = control_plane.kubectl("get", "configmap", "before-etcd-restart", "-n", "default",
                                 "-o", "jsonpath={.data.k}")  # fmt: skip
    assert kept.stdout == "v"
    control_plane.kubectl("delete", "configmap", "before-etcd-restart", "-n", "default")
    after = control_plane.alive
    assert len(after) == 4 and after.pop("etcd") != pids.pop("etcd")
    assert after == pids


def test_a_component_that_exits_on_its_own_is_started_again(
    control_plane: ControlPlane,
) -> None:
    """As the kubelet restarts a static pod: kube-scheduler exits when it finds its cache
    corrupted (seen after an etcd restart); the control plane starts it again with the
    same flags, and it schedules again."""
    before = control_plane.alive
    os.kill(before["kube-scheduler"], signal.SIGKILL)  # not through _kill: on its own

    def restarted() -> bool:
        now = control_plane.alive
        return now.get("kube-scheduler", before["kube-scheduler"]) != before["kube-scheduler"]

    deadline = time.monotonic() + 30
    while not restarted():
        assert time.monotonic() < deadline, control_plane.alive
        time.sleep(0.5)
    assert control_plane.restarts.get("kube-scheduler", 0) >= 1
    after = control_plane.alive
    assert {k: v for k, v in after.items() if k != "kube-scheduler"} == {
        k: v for k, v in before.items() if k != "kube-scheduler"
    }


def test_stop_leaves_no_processes_and_is_idempotent(tmp_path: Path) -> None:
    cp = ControlPlane(tmp_path)
    cp.start()
    pids = cp.pids
    assert len(pids) == 4 and cp.leftover_pids(pids) == pids
    cp.stop()
    assert cp.leftover_pids(pids) == []
    assert not cp.running
    cp.stop()


def record_hook(cp: ControlPlane, state: Path) -> Callable[[], None]:
    """A `--hook` for the CLI test: proves hooks get the running control plane."""
    (state / "hook-ran").write_text(cp.kubectl("get", "--raw", "/readyz").stdout)
    return lambda: (state / "hook-cleaned-up").write_text("yes")


def test_cli_up_runs_hooks_prints_kubeconfig_and_down_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "tests.localcluster", *args, "--state-dir", str(state)]
        return subprocess.run(cmd, cwd=tools.REPO_ROOT, capture_output=True, text=True, timeout=300)

    hook = f"{__name__}:record_hook"
    started = cli("up", "--hook", hook)
    assert started.returncode == 0, started.stderr
    kubeconfig = state / "admin.kubeconfig"
    assert started.stdout.splitlines()[-1] == f"export KUBECONFIG={kubeconfig}"
    pids = json.loads((state / "ready").read_text())["pids"]
    try:
        assert (state / "hook-ran").read_text().strip() == "ok"
        again = cli("up")  # already running: just the export line
        assert again.stdout.splitlines() == [f"export KUBECONFIG={kubeconfig}"]
        assert cli("status").returncode == 0
    finally:
        stopped = cli("down")
    assert stopped.returncode == 0, stopped.stderr
    assert (state / "hook-cleaned-up").read_text() == "yes"
    assert ControlPlane.leftover_pids(pids) == []
    assert cli("status").returncode == 1
