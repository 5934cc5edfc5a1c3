"""Kueue's controller manager against the local control plane (test infrastructure).

The upstream manager (``sigs.k8s.io/kueue/cmd/kueue`` at ``KUEUE_VERSION``, built by
hack/cluster-tools/build.sh) runs as a local process like the control-plane components:
its own process group, ``PR_SET_PDEATHSIG=SIGKILL``, log in ``<workdir>/logs/kueue.log``.
``start()`` applies the CRDs and the manager's ClusterRoles of the same module version,
binds them to a client-cert user ``kueue-controller-manager`` (so Kueue runs with its own
RBAC, not as admin), and starts the manager with a Configuration file:

- ``internalCertManagement.enable: false``: Kueue would otherwise rotate a serving cert
  into a Secret and patch the caBundle of webhook configurations that point at a
  Service. The local cluster has no kube-proxy, so a Service's cluster IP is not
  reachable from the API server. Instead the serving cert is issued here (cluster CA,
  SANs 127.0.0.1/localhost) into ``webhook.certDir``, and Kueue's own webhook
  configurations (``config/components/webhook/manifests.yaml`` of the module, with the
  pod/deployment/statefulset namespaceSelectors of its kustomization) are registered
  with ``clientConfig.url: https://127.0.0.1:<port><path>`` and the cluster CA.
- Only the webhooks Kueue serves for what is enabled here are registered: its own
  objects (ClusterQueue, Cohort, ResourceFlavor, Workload) and plain pods
  (``integrations.frameworks: [pod]``). Kueue answers the other paths with no-op
  handlers; leaving them out keeps Deployments, StatefulSets and Jobs off Kueue's path.
- Leader election off; webhook, health and metrics on free 127.0.0.1 ports; the
  visibility API server (an aggregated API) off.
- With internal cert management off the manager reads its metrics serving cert from
  the fixed path /etc/kueue/metrics/certs (a mounted Secret in a real install): it runs
  under ``unshare --mount`` with the same cert bind-mounted there, so the host keeps
  only an empty directory at that path.

Ready = the manager's /readyz (its webhook server is listening) and a dry-run pod create
that comes back with Kueue's scheduling gate (the API server reaches the webhook).
``stop()`` deletes the webhook configurations first (a failurePolicy Fail webhook with
nobody behind it would refuse every pod create), then stops the process.

    kueue = Kueue(control_plane)
    kueue.start()
    try:
        ...
    finally:
        kueue.stop()
"""

from __future__ import annotations

import atexit
import base64
import copy
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Any

import yaml

from tests.localcluster import tools
from tests.localcluster.controlplane import (
    ControlPlane,
    _Component,
    free_port,
    popen_owned,
)

Obj = dict[str, Any]

NAMESPACE = "kueue-system"
USER = "kueue-controller-manager"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
POD_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
MANAGED_FINALIZER = "kueue.x-k8s.io/managed"
API = "kueue.x-k8s.io/v1beta2"
START_TIMEOUT_SECONDS = 120.0
METRICS_CERT_PATH = Path("/etc/kueue/metrics/certs")  # fixed in cmd/kueue/main.go
# Namespaces whose pods Kueue never manages (its default; the same as the webhooks').
EXEMPT_NAMESPACES = ["kube-system", NAMESPACE]
RBAC_FILES = (
    "rbac-manager-role.yaml",
    "rbac-metrics-auth-role.yaml",
    "rbac-manager-secrets-role.yaml",
)
_SERVED_WEBHOOK_GROUPS = {"kueue.x-k8s.io", ""}  # its own objects and plain pods

_live: weakref.WeakSet[Kueue] = weakref.WeakSet()


@atexit.register
def _stop_all_at_exit() -> None:  # registered after the control plane's: runs before it
    for kueue in list(_live):
        kueue.stop()


def webhook_configurations(manifests: str, patches: str, url: str, ca_bundle: bytes) -> list[Obj]:
    """Kueue's webhook configurations rewritten for a manager at ``url`` (pure).

    ``manifests`` is the module's config/components/webhook/manifests.yaml, ``patches``
    its kustomization.yaml (whose patches add the namespaceSelectors); service refs
    become ``url + path``; only webhooks for Kueue's own objects and pods are kept.
    """
    selectors: dict[str, Obj] = {}
    for patch in yaml.safe_load(patches).get("patches", []):
        for hook in yaml.safe_load(patch["patch"]).get("webhooks", []):
            if "namespaceSelector" in hook:
                selectors[hook["name"]] = hook["namespaceSelector"]
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        config = copy.deepcopy(doc)
        config["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        hooks = []
        for hook in config["webhooks"]:
            groups = {g for rule in hook["rules"] for g in rule["apiGroups"]}
            if not groups <= _SERVED_WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"{url}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            if hook["name"] in selectors:
                hook["namespaceSelector"] = selectors[hook["name"]]
            hook.setdefault("timeoutSeconds", 10)
            hooks.append(hook)
        config["webhooks"] = hooks
        out.append(config)
    return out


def manager_config(webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path) -> Obj:
    """Kueue's Configuration for a manager on loopback ports with a given cert (pure)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": EXEMPT_NAMESPACES,
                }
            ]
        },
        "integrations": {"frameworks": ["pod"]},
        "featureGates": {"VisibilityOnDemand": False},
        "clientConnection": {"qps": 50, "burst": 100},
    }


class Kueue:
    """Kueue's manager as a local process, its webhooks registered by URL."""

    def __init__(
        self, control_plane: ControlPlane, workdir: Path | None = None,
        kueue_dir: Path | None = None,
    ) -> None:  # fmt: skip
        self.cp = control_plane
        self.workdir = Path(workdir or control_plane.workdir / "kueue").resolve()
        self.dir = Path(kueue_dir) if kueue_dir is not None else tools.kueue_dir()
        self.log = control_plane.log_dir / "kueue.log"
        self.webhook_port = 0
        self.health_port = 0
        self.metrics_port = 0
        self.webhook_names: list[tuple[str, str]] = []  # (kind, name)
        self._component: _Component | None = None

    @property
    def running(self) -> bool:
        return self._component is not None and self._component.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._component.process.pid if self._component else None

    def start(self) -> None:
        if self._component is not None:
            raise RuntimeError("kueue already started")
        _live.add(self)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Unregister the webhooks, then SIGTERM the process group (SIGKILL after a
        grace period). Idempotent."""
        names, self.webhook_names = self.webhook_names, []
        if self.cp.running:
            for kind, name in names:
                self.cp.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        comp, self._component = self._component, None
        if comp is not None:
            comp.stop()
        _live.discard(self)

    def stop_manager(self) -> None:
        """Stop the manager's process only: its webhook configurations stay registered,
        as a real manager's restart leaves them (pod creates and updates are refused
        until start() again)."""
        comp, self._component = self._component, None
        if comp is not None:
            comp.stop()

    # -- internals ----------------------------------------------------------------------
    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cp = self.cp
        cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(self.dir / "crds"))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f",
                   str(self.dir / "crds"))  # fmt: skip
        cp.kubectl("create", "namespace", NAMESPACE, check=False)
        self._apply_rbac()

        cert_dir = self.workdir / "certs"
        serving = cp.issue_cert("kueue-webhook", "kueue-webhook", [], ["127.0.0.1", "localhost"],
                                server=True)  # fmt: skip
        cert_dir.mkdir(exist_ok=True)
        for src, dst in zip(serving, ("tls.crt", "tls.key"), strict=True):
            (cert_dir / dst).write_bytes(src.read_bytes())
            os.chmod(cert_dir / dst, 0o600)
        kubeconfig = cp.write_kubeconfig(
            self.workdir / "kueue.kubeconfig", USER,
            *cp.issue_cert("kueue-client", USER, [], [], server=False),
        )  # fmt: skip

        self.webhook_port, self.health_port, self.metrics_port = (free_port() for _ in "abc")
        config = self.workdir / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                manager_config(self.webhook_port, self.health_port, self.metrics_port, cert_dir)
            )
        )
        # With internal cert management off, Kueue reads its metrics serving cert from a
        # fixed path (a mounted Secret in a real install): bind-mount ours there in a
        # private mount namespace (same pid after exec, so PR_SET_PDEATHSIG still holds).
        METRICS_CERT_PATH.mkdir(parents=True, exist_ok=True)  # an empty mount point
        argv = [str(self.dir / "kueue"), f"--config={config}", "--zap-log-level=2"]
        script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
        unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        with self.log.open("ab") as out:
            process = popen_owned(
                [*unshare, str(cert_dir), str(METRICS_CERT_PATH), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
            )
        self._component = _Component("kueue", process, self.log)
        self._wait("kueue /readyz", self._ready)
        self._register_webhooks()
        self._wait("kueue pod webhook (dry-run)", self._webhook_answers)

    def _apply_rbac(self) -> None:
        """The module's manager ClusterRoles and its Role in ``kueue-system``, bound to
        the manager's client-cert user."""
        objects = []
        for name in RBAC_FILES:
            for doc in yaml.safe_load_all((self.dir / name).read_text()):
                if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
                    continue
                kind = doc["kind"]
                meta: Obj = {"name": f"kueue-{doc['metadata']['name']}"}
                if kind == "Role":
                    meta["namespace"] = NAMESPACE
                doc["metadata"] = meta
                rbac = "rbac.authorization.k8s.io"
                binding = {
                    "apiVersion": f"{rbac}/v1",
                    "kind": f"{kind}Binding",
                    "metadata": meta,
                    "roleRef": {"apiGroup": rbac, "kind": kind, "name": meta["name"]},
                    "subjects": [{"apiGroup": rbac, "kind": "User", "name": USER}],
                }
                objects += [doc, binding]
        self.cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))

    def _register_webhooks(self) -> None:
        configs = webhook_configurations(
            (self.dir / "webhooks.yaml").read_text(),
            (self.dir / "webhooks-kustomization.yaml").read_text(),
            f"https://127.0.0.1:{self.webhook_port}",
            self.cp.ca_cert.read_bytes(),
        )
        self.cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(configs))
        self.webhook_names = [(c["kind"].lower(), c["metadata"]["name"]) for c in configs]

    def _ready(self) -> bool:
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def _webhook_answers(self) -> bool:
        """A dry-run create of a queued pod comes back gated by Kueue's webhook."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kueue-probe", "labels": {QUEUE_NAME_LABEL: "probe"}},
            "spec": {"containers": [{"name": "c", "image": "probe"}]},
        }
        result = self.cp.kubectl(
            "create", "-n", "default", "--dry-run=server", "-o", "json", "-f", "-",
            input=json.dumps(pod), check=False,
        )  # fmt: skip
        if result.returncode != 0:
            return False
        gates = json.loads(result.stdout)["spec"].get("schedulingGates") or []
        return any(g.get("name") == ADMISSION_GATE for g in gates)

    def _wait(self, what: str, probe: Any) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        assert self._component is not None
        while not probe():
            if self._component.process.poll() is not None:
                raise RuntimeError(
                    f"kueue exited with {self._component.process.returncode} while waiting "
                    f"for {what}; last log lines ({self.log}):\n{self._component.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{what} not ready after {START_TIMEOUT_SECONDS}s\n"
                    f"{self._component.log_tail(20)}"
                )
            time.sleep(0.2)


def up_hook(cp: ControlPlane, state_dir: Path) -> Any:
    """``python -m tests.localcluster up --hook tests.localcluster.kueue:up_hook``
    (``KUEUE=1 make cluster-up``): Kueue in the background daemon; returns its stop."""
    k = Kueue(cp, state_dir / "kueue", kueue_dir=tools.kueue_dir(build=True))
    k.start()
    return k.stop
