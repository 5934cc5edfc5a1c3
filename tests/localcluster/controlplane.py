"""A real Kubernetes control plane on loopback ports (test infrastructure).

etcd, kube-apiserver, kube-controller-manager and kube-scheduler, the upstream binaries
built by hack/cluster-tools/build.sh, run as local processes, each in its own process
group with its log in ``<workdir>/logs/``.  Certificates are generated per start: a CA,
the API server's serving cert for 127.0.0.1/localhost, an admin client cert in
system:masters, client certs for the controller-manager and scheduler (their bootstrap
RBAC identities), the API server's kubelet client cert (``kubectl logs``; kubelet serving
certs are not verified, as with kubeadm), the front-proxy (aggregation) client cert and
the service-account key pair (TokenRequest works).  Authorization is Node,RBAC;
admission plugins are the API server's defaults.

Node-related timings are short so node-loss tests finish in seconds, not minutes:
nodes go NotReady after ``NODE_MONITOR_GRACE_SECONDS`` and the default not-ready /
unreachable tolerations added to pods are ``POD_EVICTION_TOLERATION_SECONDS``.

    cp = ControlPlane(tmp_path)
    cp.start()
    try:
        cp.kubectl("get", "--raw", "/readyz")
    finally:
        cp.stop()
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml

from tests.localcluster import certs, tools

if TYPE_CHECKING:
    import kubernetes.client

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
NODE_MONITOR_GRACE_SECONDS = 20
POD_EVICTION_TOLERATION_SECONDS = 10
START_TIMEOUT_SECONDS = 120.0
STOP_GRACE_SECONDS = 10.0
SUPERVISE_SECONDS = 2.0
"""How often a started control plane looks for a component that exited on its own."""
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """preexec_fn: the kernel SIGKILLs the child if the process that started it dies.

    The safety net for a SIGKILLed pytest or daemon: no orphaned etcd/apiserver.  The
    kernel ties this to the *thread* that forked: `popen_owned` forks from a thread
    that lives as long as the process.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def popen_owned(args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(args, preexec_fn=_die_with_parent, **kwargs)` from a thread of
    its own that lives until the process ends: the kernel ties PR_SET_PDEATHSIG to the
    thread that forked, and a caller's thread may end first (the chaos soak restarts
    etcd or Kueue from a fault's thread, which would take the new process with it)."""
    outcome: list[subprocess.Popen[bytes] | BaseException] = []
    ready = threading.Event()

    def own() -> None:
        try:
            proc = subprocess.Popen(args, preexec_fn=_die_with_parent, **kwargs)
        except BaseException as exc:  # handed to the caller below
            outcome.append(exc)
            ready.set()
            return
        outcome.append(proc)
        ready.set()
        proc.wait()

    threading.Thread(target=own, name=f"owns-{Path(args[0]).name}", daemon=True).start()
    ready.wait()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def free_port() -> int:
    """A currently free 127.0.0.1 TCP port (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class KubectlError(subprocess.CalledProcessError):
    """kubectl exited non-zero; unlike CalledProcessError, str() shows its stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {self.stderr}\nstdout: {self.stdout}"


@dataclass
class _Component:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    args: tuple[str, ...] = ()
    pgid: int = field(init=False)

    def __post_init__(self) -> None:
        self.pgid = self.process.pid  # start_new_session: the child leads its group

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after STOP_GRACE_SECONDS, then wait until
        every member of the group is gone."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        self.process.wait()
        while self.group_alive():  # other members of the group, if any
            time.sleep(0.05)

    def group_alive(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # pragma: no cover - pgid reused by another user's group
            return False
        return True

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


_live: weakref.WeakSet[ControlPlane] = weakref.WeakSet()


@atexit.register
def _stop_all_at_exit() -> None:
    for cp in list(_live):
        cp.stop()


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on 127.0.0.1.

    All state (certs, etcd data, logs, kubeconfigs) lives under ``workdir``.
    ``start()`` returns once /readyz is ok, the controller-manager and scheduler are
    healthy and the ``default`` ServiceAccount exists (pods can be created).
    ``stop()`` kills every process group and waits for them; it is idempotent and also
    runs at interpreter exit for any control plane still running.
    """

    def __init__(self, workdir: Path, bin_dir: Path | None = None) -> None:
        self.workdir = Path(workdir).resolve()
        self.bin_dir = Path(bin_dir) if bin_dir is not None else tools.bin_dir()
        self.pki_dir = self.workdir / "pki"
        self.log_dir = self.workdir / "logs"
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.ca_cert = self.pki_dir / "ca.crt"
        self.ca_key = self.pki_dir / "ca.key"
        self.kubelet_client_cert = self.pki_dir / f"{KUBELET_CLIENT_USER}.crt"
        self.kubelet_client_key = self.pki_dir / f"{KUBELET_CLIENT_USER}.key"
        self.service_account_key = self.pki_dir / "sa.key"
        self.service_account_pub = self.pki_dir / "sa.pub"
        self.apiserver_port = 0
        self.etcd_port = 0
        self.etcd_peer_port = 0
        self.server = ""
        self._components: list[_Component] = []
        self._lock = threading.RLock()  # the components, between a kill and the supervisor
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._restarts: dict[str, int] = {}

    # -- public API ---------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return any(c.process.poll() is None for c in self._components)

    @property
    def pids(self) -> list[int]:
        return [c.process.pid for c in self._components]

    @property
    def alive(self) -> dict[str, int]:
        """Each component still running, by name: its pid."""
        return {c.name: c.process.pid for c in self._components if c.process.poll() is None}

    def start(self) -> None:
        if self._components:
            raise RuntimeError("control plane already started")
        _live.add(self)
        self._stopping.clear()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self._supervisor = threading.Thread(target=self._supervise, name="cp-supervisor",
                                            daemon=True)  # fmt: skip
        self._supervisor.start()

    def stop(self) -> None:
        """SIGTERM each component's process group (reverse start order), then SIGKILL."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(10)
            self._supervisor = None
        with self._lock:
            components, self._components = self._components, []
        for comp in reversed(components):
            comp.stop()
        _live.discard(self)

    @property
    def restarts(self) -> dict[str, int]:
        """Components started again after they exited on their own, by name: how often."""
        with self._lock:
            return dict(self._restarts)

    def _supervise(self) -> None:
        """Start again, with the same flags, a component that exited on its own, as the
        kubelet restarts a control plane's static pods: kube-scheduler exits when it
        finds its cache corrupted (a pod bound to another node than it assumed, seen
        after an etcd restart in the chaos soak). A component killed on purpose
        (`_kill`) is no longer supervised."""
        while not self._stopping.wait(SUPERVISE_SECONDS):
            with self._lock:
                for comp in list(self._components):
                    if comp.process.poll() is None or self._stopping.is_set():
                        continue
                    try:
                        self._spawn(comp.name, *comp.args)
                    except OSError:  # kept, and tried again at the next look
                        continue
                    self._components.remove(comp)
                    self._restarts[comp.name] = self._restarts.get(comp.name, 0) + 1

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver (a crash): every client sees connection refused until
        start_apiserver(). etcd and the other components keep running."""
        self._kill("kube-apiserver")

    def start_apiserver(self) -> None:
        """Start kube-apiserver again (same port, flags and etcd) after
        kill_apiserver(); returns once /readyz is ok."""
        self._start_apiserver()
        self._wait("kube-apiserver", lambda: self._http_ok(f"{self.server}/readyz", b"ok"))

    def restart_apiserver(self, down_seconds: float = 0.0) -> None:
        """kill_apiserver(), `down_seconds` of outage, start_apiserver()."""
        self.kill_apiserver()
        time.sleep(down_seconds)
        self.start_apiserver()

    def restart_etcd(self, down_seconds: float = 0.0) -> None:
        """etcd SIGKILLed (its data directory stays, as a crashed member's), `down_seconds`
        of outage, started again on its ports; returns once kube-apiserver is ready on it
        again. A component that exits meanwhile is started again by the supervisor."""
        self._kill("etcd")
        time.sleep(down_seconds)
        self._start_etcd()
        self._wait("etcd", self._etcd_healthy)
        self._wait("kube-apiserver", lambda: self._http_ok(f"{self.server}/readyz", b"ok"))

    @staticmethod
    def leftover_pids(pids: list[int]) -> list[int]:
        """Which of ``pids`` (e.g. a saved ``self.pids``) still exist (not zombies)."""
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                alive.append(pid)
        return alive

    def issue_cert(
        self,
        name: str,
        common_name: str,
        organizations: list[str],
        sans: list[str],
        server: bool,
    ) -> tuple[Path, Path]:
        """A certificate/key pair in ``<workdir>/pki`` signed by the cluster CA.

        Client certs authenticate as user ``common_name`` in groups ``organizations``.
        """
        return certs.issue_cert(
            self.ca_cert, self.ca_key, self.pki_dir, name, common_name, organizations,
            sans, server,
        )  # fmt: skip

    def write_kubeconfig(
        self, path: Path, user: str, cert: Path | None = None, key: Path | None = None,
        token: str | None = None,
    ) -> Path:  # fmt: skip
        """A kubeconfig for this cluster authenticating with a client cert or a token."""
        credentials: dict[str, str] = {}
        if cert is not None and key is not None:
            credentials = {"client-certificate": str(cert), "client-key": str(key)}
        if token is not None:
            credentials["token"] = token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_cert)},
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        os.chmod(path, 0o600)
        return path

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True,
        kubeconfig: Path | None = None, timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """Run kubectl against this cluster (admin unless ``kubeconfig`` is given)."""
        cmd = [str(self.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig or self.kubeconfig)]
        result = subprocess.run(
            [*cmd, *args], input=input, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, result.args, result.stdout, result.stderr)
        return result

    def helm(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        """Run the pinned helm against this cluster (admin); `template` renders for the
        pinned Kubernetes version, as install does for the API server's."""
        extra = tools.helm_kube_version() if args[:1] == ("template",) else []
        return subprocess.run(
            [str(self.bin_dir / "helm"), *args, *extra],
            capture_output=True, text=True, env=self.env(), timeout=timeout,
        )  # fmt: skip

    def api_client(self) -> kubernetes.client.ApiClient:
        """A kubernetes Python client for the admin user (caller closes it)."""
        import kubernetes.config

        client = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )
        return cast("kubernetes.client.ApiClient", client)

    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG for this cluster and bin_dir first on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    # -- internals ----------------------------------------------------------------------
    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self._make_pki()
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.apiserver_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.write_kubeconfig(self.kubeconfig, "admin", *self._pair("admin"))
        kcm_kubeconfig = self.write_kubeconfig(
            self.workdir / "controller-manager.kubeconfig",
            "system:kube-controller-manager",
            *self._pair("controller-manager"),
        )
        scheduler_kubeconfig = self.write_kubeconfig(
            self.workdir / "scheduler.kubeconfig",
            "system:kube-scheduler",
            *self._pair("scheduler"),
        )

        self._start_etcd()
        self._wait(
            "etcd",
            self._etcd_healthy,
        )
        self._start_apiserver()
        self._wait("kube-apiserver", lambda: self._http_ok(f"{self.server}/readyz", b"ok"))

        kcm_port = free_port()
        self._spawn(
            "kube-controller-manager",
            f"--kubeconfig={kcm_kubeconfig}",
            f"--authentication-kubeconfig={kcm_kubeconfig}",
            f"--authorization-kubeconfig={kcm_kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={kcm_port}",
            f"--cert-dir={self.workdir / 'controller-manager-certs'}",
            "--leader-elect=false",
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.service_account_key}",
            f"--root-ca-file={self.ca_cert}",
            f"--cluster-signing-cert-file={self.ca_cert}",
            f"--cluster-signing-key-file={self.ca_key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--node-monitor-period=2s",
            f"--node-monitor-grace-period={NODE_MONITOR_GRACE_SECONDS}s",
            "--v=1",
        )
        scheduler_port = free_port()
        self._spawn(
            "kube-scheduler",
            f"--kubeconfig={scheduler_kubeconfig}",
            f"--authentication-kubeconfig={scheduler_kubeconfig}",
            f"--authorization-kubeconfig={scheduler_kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={scheduler_port}",
            f"--cert-dir={self.workdir / 'scheduler-certs'}",
            "--leader-elect=false",
            "--v=1",
        )
        self._wait(
            "kube-controller-manager",
            lambda: self._http_ok(f"https://127.0.0.1:{kcm_port}/healthz", b"ok", insecure=True),
        )
        self._wait(
            "kube-scheduler",
            lambda: self._http_ok(
                f"https://127.0.0.1:{scheduler_port}/healthz", b"ok", insecure=True
            ),
        )
        # The ServiceAccount controller creates it: once it exists pods can be created.
        self._wait(
            "default ServiceAccount",
            lambda: self._http_ok(
                f"{self.server}/api/v1/namespaces/default/serviceaccounts/default", b"default"
            ),
        )

    def _pair(self, name: str) -> tuple[Path, Path]:
        return self.pki_dir / f"{name}.crt", self.pki_dir / f"{name}.key"

    def _make_pki(self) -> None:
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        certs.create_ca(self.pki_dir)
        self.issue_cert(
            "apiserver",
            "kube-apiserver",
            [],
            [
                "127.0.0.1",
                "localhost",
                "10.96.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            server=True,
        )
        self.issue_cert("admin", "admin", ["system:masters"], [], server=False)
        self.issue_cert(
            "controller-manager", "system:kube-controller-manager", [], [], server=False
        )
        self.issue_cert("scheduler", "system:kube-scheduler", [], [], server=False)
        # The API server's identity towards kubelets (kubectl logs/exec/port-forward).
        self.issue_cert(KUBELET_CLIENT_USER, KUBELET_CLIENT_USER, ["system:masters"], [], False)
        # The aggregation layer's client identity (and quiet requestheader CA lookups).
        self.issue_cert("front-proxy-client", "front-proxy-client", [], [], server=False)
        certs.generate_key(self.service_account_key)
        certs.public_key(self.service_account_key, self.service_account_pub)

    def _kill(self, name: str) -> None:
        """SIGKILL one component's process group (a crash) and forget it."""
        with self._lock:
            (comp,) = [c for c in self._components if c.name == name]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(comp.pgid, signal.SIGKILL)
            comp.process.wait()
            while comp.group_alive():
                time.sleep(0.05)
            self._components.remove(comp)

    def _etcd_healthy(self) -> bool:
        return self._http_ok(f"http://127.0.0.1:{self.etcd_port}/health", b"true")

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self._spawn(
            "etcd",
            "--name=default",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync",  # throwaway test data: don't pay for fsync
            "--log-level=warn",
        )

    def _start_apiserver(self) -> None:
        self._spawn(
            "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={self.pki_dir / 'apiserver.crt'}",
            f"--tls-private-key-file={self.pki_dir / 'apiserver.key'}",
            f"--client-ca-file={self.ca_cert}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={self.service_account_pub}",
            f"--service-account-signing-key-file={self.service_account_key}",
            f"--kubelet-client-certificate={self.kubelet_client_cert}",
            f"--kubelet-client-key={self.kubelet_client_key}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--requestheader-client-ca-file={self.ca_cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.pki_dir / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={self.pki_dir / 'front-proxy-client.key'}",
            f"--default-not-ready-toleration-seconds={POD_EVICTION_TOLERATION_SECONDS}",
            f"--default-unreachable-toleration-seconds={POD_EVICTION_TOLERATION_SECONDS}",
            "--profiling=false",
            "--v=1",
        )

    def _spawn(self, name: str, *args: str) -> None:
        if self._stopping.is_set():  # a fault's restart racing stop(): nothing to start
            raise RuntimeError(f"control plane stopped: {name} not started")
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as out:
            process = popen_owned(
                [str(self.bin_dir / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
            )
        with self._lock:
            self._components.append(_Component(name, process, log, args))

    def _wait(self, what: str, probe: Any) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            for comp in self._components:
                # once started, another component's exit is the supervisor's to mend
                started = self._supervisor is not None and comp.name != what
                if comp.process.poll() is not None and not started:
                    raise RuntimeError(
                        f"{comp.name} exited with {comp.process.returncode} while waiting for "
                        f"{what}; last log lines ({comp.log}):\n{comp.log_tail()}"
                    )
            if probe():
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {c.name}\n{c.log_tail(10)}" for c in self._components)
                raise TimeoutError(f"{what} not ready after {START_TIMEOUT_SECONDS}s\n{tails}")
            time.sleep(0.2)

    def _http_ok(self, url: str, expect: bytes, insecure: bool = False) -> bool:
        context: ssl.SSLContext | None = None
        if url.startswith("https://"):
            if insecure:  # components' self-generated serving certs; /healthz is public
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            else:
                context = ssl.create_default_context(cafile=str(self.ca_cert))
                context.load_cert_chain(*map(str, self._pair("admin")))
        try:
            with urllib.request.urlopen(url, timeout=5, context=context) as response:
                return bool(response.status == 200 and expect in response.read())
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False


def describe(cp: ControlPlane) -> str:
    """One JSON line describing a running control plane (for logs and the CLI)."""
    return json.dumps(
        {
            "server": cp.server,
            "kubeconfig": str(cp.kubeconfig),
            "binDir": str(cp.bin_dir),
            "pids": cp.pids,
        }
    )
