"""Installing tuneop on the real local control plane: with Helm and with the plain
manifests.

The API server itself validates every object (built-in schemas, the CRDs' schemas, the
PodSecurity admission plugin with the `restricted` level on the operator's namespace)
and evaluates the chart's RBAC: each permission the operator needs is checked with
`kubectl auth can-i` as the chart's ServiceAccount, and the operator's ability to grant
each trainer its narrow progress-ConfigMap Role (RBAC's escalation check) is exercised
for real. The operator Deployment is installed with 0 replicas so that it does not
reconcile the TuningJobs of other tests sharing the session's cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from tuneop.render import rbac

from hack.images import image_tag
from tests.e2e.harness import Operator, free_port, wait_for
from tests.localcluster import tools
from tests.localcluster.cluster import LocalCluster
from tests.localcluster.controlplane import ControlPlane
from tests.localcluster.kubelet.node import TOLERATION, KubeletNode

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tuneop"
MANIFESTS = ROOT / "manifests"
RELEASE = "tuneop-e2e"
NAMESPACE = "tuneop-e2e"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
# The release (and namespace) in which the real operator runs with the chart's RBAC.
OP_RELEASE = "tuneop-e2e-op"
OP_SERVICE_ACCOUNT = f"system:serviceaccount:{OP_RELEASE}:{OP_RELEASE}"
PSA_WARNING = "would violate PodSecurity"
APP_VERSION = image_tag()
# The uninstall hook is a Job; on the bare control plane (no node) it would wait for ever.
NO_NODE = ("--no-hooks",)


def helm(cp: ControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = cp.helm(*args)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def apply_crds(cp: ControlPlane) -> None:
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(MANIFESTS / "crd"))
    cp.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/tuningjobs.tuneop.io",
        "crd/clusterkopfpeerings.kopf.dev",
        "crd/kopfpeerings.kopf.dev",
    )


def test_plain_manifests_are_accepted_under_the_restricted_pod_security_level(
    control_plane: ControlPlane,
) -> None:
    cp = control_plane
    apply_crds(cp)
    cp.kubectl("apply", "-f", str(MANIFESTS / "rbac" / "namespace.yaml"))
    ns = cp.kubectl("get", "namespace", "tuneop-system", "-o", "jsonpath={.metadata.labels}")
    assert '"pod-security.kubernetes.io/enforce":"restricted"' in ns.stdout
    # The operator's objects, validated and admitted by the API server (not persisted).
    result = cp.kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        str(MANIFESTS / "rbac"),
        "-f",
        str(MANIFESTS / "operator"),
    )
    assert PSA_WARNING not in result.stderr, result.stderr
    for obj in (
        "serviceaccount/tuneop",
        "clusterrole.rbac.authorization.k8s.io/tuneop",
        "clusterrolebinding.rbac.authorization.k8s.io/tuneop",
        "deployment.apps/tuneop",
        "service/tuneop-metrics",
    ):
        assert obj in result.stdout, result.stdout
    # The samples pass the CRD's schema and CEL rules.
    samples = cp.kubectl("apply", "--dry-run=server", "-f", str(MANIFESTS / "samples"))
    assert "tuningjob.tuneop.io/" in samples.stdout


def test_pod_security_check_is_not_vacuous(control_plane: ControlPlane) -> None:
    """The same Deployment with privilege escalation allowed is flagged by the PodSecurity
    admission plugin, so the check above really looks at the pod template."""
    cp = control_plane
    cp.kubectl("apply", "-f", str(MANIFESTS / "rbac" / "namespace.yaml"))
    rendered = helm(
        cp,
        "template",
        "tuneop",
        str(CHART),
        "--namespace",
        "tuneop-system",
        "--show-only",
        "templates/deployment.yaml",
        "--set",
        "securityContext.allowPrivilegeEscalation=true",
    ).stdout
    result = cp.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered, check=False)
    assert PSA_WARNING in result.stderr, result.stderr
    assert "allowPrivilegeEscalation" in result.stderr


def can_i(cp: ControlPlane, verb: str, resource: str, *extra: str) -> bool:
    result = cp.kubectl(
        "auth", "can-i", verb, resource, "--as", SERVICE_ACCOUNT, *extra, check=False
    )
    return result.stdout.strip() == "yes"


def test_helm_install_grants_the_operator_what_it_needs_and_no_more(
    control_plane: ControlPlane,
) -> None:
    cp = control_plane
    apply_crds(cp)  # as another test may have; helm skips CRDs that exist
    helm(cp, "uninstall", RELEASE, "--namespace", NAMESPACE, *NO_NODE, check=False)
    installed = helm(
        cp,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--set",
        "replicaCount=0",
        "--set",
        "metrics.service.enabled=true",
        "--wait",
        "--timeout",
        "2m",
    )
    try:
        assert "STATUS: deployed" in installed.stdout
        assert f"tuneop 0.1.0 is installed in namespace {NAMESPACE}" in installed.stdout
        deploy = cp.kubectl(
            "-n", NAMESPACE, "get", "deploy", RELEASE, "-o", "jsonpath={.spec.template.spec}"
        )
        assert '"serviceAccountName":"tuneop-e2e"' in deploy.stdout

        # Every rule of OPERATOR_RULES (operator/tuneop/render/rbac.py), as the API server sees it.
        ns = ["--namespace", "research"]
        needed = []
        for rule in rbac.OPERATOR_RULES:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    plural, _, sub = resource.partition("/")
                    target = f"{plural}.{group}" if group else plural
                    extra = [f"--subresource={sub}"] if sub else []
                    needed += [(verb, target, *extra, *ns) for verb in rule["verbs"]]
        assert len(needed) > 40
        # kubectl resolves a resource by discovery: Kueue's Workload CRD makes
        # workloads.kueue.x-k8s.io known (the operator only reads them when Kueue runs)
        crd = tools.kueue_dir() / "crds" / "kueue.x-k8s.io_workloads.yaml"
        cp.kubectl("apply", "--server-side", "-f", str(crd))
        wait_for(
            lambda: "True"
            in cp.kubectl(
                "get", "crd", "workloads.kueue.x-k8s.io", "-o",
                "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False,
            ).stdout,
            30,
            "the Workload CRD established",
        )  # fmt: skip
        missing = [args for args in needed if not can_i(cp, *args)]
        assert missing == []
        not_granted = [
            ("get", "secrets", *ns),
            ("create", "clusterroles.rbac.authorization.k8s.io"),
            ("delete", "nodes"),
            ("update", "pods", *ns),  # patched only to release a Kueue pod group
            ("create", "pods", "--subresource=exec", *ns),
            ("list", "workloads.kueue.x-k8s.io", *ns),  # get only, for the message
            ("update", "configmaps", *ns),  # progress maps watched, never updated
            ("list", "secrets", *ns),
            ("patch", "kopfpeerings.kopf.dev", *ns),  # cluster-wide mode: not needed
            ("update", "tuningjobs.tuneop.io", *ns),  # every write is a patch
            ("update", "tuningjobs.tuneop.io", "--subresource=status", *ns),
        ]
        assert [args for args in not_granted if can_i(cp, *args)] == []

        # The operator grants each trainer get/patch on its own progress ConfigMap. RBAC
        # allows that only because the operator holds those permissions itself.
        grant_ns = "tuneop-e2e-grant"
        cp.kubectl("create", "namespace", grant_ns, check=False)
        as_operator = ["--as", SERVICE_ACCOUNT, "-n", grant_ns]
        cp.kubectl(
            "create",
            "role",
            "trainer-progress",
            "--verb=get,patch",
            "--resource=configmaps",
            "--resource-name=emg-cnn-progress",
            *as_operator,
        )
        cp.kubectl(
            "create",
            "rolebinding",
            "trainer-progress",
            "--role=trainer-progress",
            f"--serviceaccount={grant_ns}:emg-cnn-trainer",
            *as_operator,
        )
        # ...and cannot hand out what it does not hold (escalation is refused).
        refused = cp.kubectl(
            "create", "role", "steal", "--verb=get", "--resource=secrets", *as_operator, check=False
        )
        assert refused.returncode != 0
        assert "attempting to grant RBAC permissions not currently held" in refused.stderr
        cp.kubectl("delete", "namespace", grant_ns, "--wait=false")
    finally:
        helm(
            cp,
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            *NO_NODE,
            "--wait",
            "--timeout",
            "2m",
        )
    gone = cp.kubectl("get", "clusterrole", RELEASE, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    # Helm keeps CRDs on uninstall (existing TuningJobs survive).
    cp.kubectl("get", "crd", "tuningjobs.tuneop.io")
    cp.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def tuningjobs_watch_active(log: str) -> bool:
    """From kopf's debug log: the TuningJob watch-stream started and is not paused (kopf
    pauses it while the peering object is missing or a higher-priority peer is active)."""
    state = None
    for line in log.splitlines():
        if "watch-stream for tuningjobs" not in line:
            continue
        if "Starting the watch-stream" in line:
            state = "paused" if "(paused)" in line else "active"
        elif "Pausing the watch-stream" in line:
            state = "paused"
        elif "Resuming the watch-stream" in line:
            state = "active"
    return state == "active"


def test_the_real_operator_runs_with_only_the_charts_permissions(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """`python -m tuneop` authenticated with a token of the chart's ServiceAccount (so only
    the chart's RBAC applies: in namespaced mode a Role in the watched namespace and a
    ClusterRole of cluster-scoped reads) starts cleanly: it peers through the chart's
    KopfPeering (and creates no ClusterKopfPeering), lists and watches what kopf needs,
    serves /healthz and /metrics, logs no permission error, and its TuningJob watch is
    active (not paused waiting for peering: in namespaced mode the chart creates the
    KopfPeering). It watches one empty namespace with its own peering name, so it never
    touches the TuningJobs of other tests."""
    cp = control_plane
    apply_crds(cp)
    watched = "tuneop-e2e-watched"
    peering = "tuneop-e2e-rbac"
    cp.kubectl("create", "namespace", watched, check=False)
    helm(cp, "uninstall", OP_RELEASE, "--namespace", OP_RELEASE, *NO_NODE, check=False)
    helm(
        cp,
        "install",
        OP_RELEASE,
        str(CHART),
        "--namespace",
        OP_RELEASE,
        "--create-namespace",
        "--set",
        "replicaCount=0",
        "--set",
        f"operator.watchNamespaces={{{watched}}}",
        "--set",
        f"operator.peeringName={peering}",
    )
    operator: Operator | None = None
    try:
        cp.kubectl("-n", watched, "get", "kopfpeering", peering)  # from the chart
        token = cp.kubectl(
            "create", "token", OP_RELEASE, "--namespace", OP_RELEASE, "--duration=1h"
        ).stdout.strip()
        kubeconfig = cp.write_kubeconfig(tmp_path / "sa.kubeconfig", "tuneop-sa", token=token)
        whoami = cp.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}",
                            kubeconfig=kubeconfig)  # fmt: skip
        assert whoami.stdout == OP_SERVICE_ACCOUNT
        operator = Operator(
            kubeconfig,
            tmp_path / "operator.log",
            TUNEOP_OPERATOR_NAMESPACES=watched,
            TUNEOP_OPERATOR_PEERING=peering,
            TUNEOP_OPERATOR_LOG_LEVEL="DEBUG",
        ).start()
        op = operator
        wait_for(lambda: tuningjobs_watch_active(op.log_tail(10_000)), 30, "TuningJob watch")
        time.sleep(3)  # a few more seconds of kopf's watches and peering keep-alives
        assert operator.healthy()
        assert "tuneop_tuningjob_phase" in operator.metrics()
        # namespaced mode: no cluster-wide peering object (nor the right to create one)
        absent = cp.kubectl("get", "clusterkopfpeering", peering, check=False)
        assert absent.returncode != 0 and "NotFound" in absent.stderr
        log = operator.log_tail(10_000)
        assert tuningjobs_watch_active(log), log
        # a refused request as kopf and the client log it (not any "403" in the log: a
        # random peering priority can contain it)
        for marker in (" 403", "(403)", "Forbidden", "forbidden"):
            assert marker not in log, log
    finally:
        if operator is not None:
            operator.stop()
        cp.kubectl("delete", "clusterkopfpeering", peering, "--ignore-not-found")
        helm(cp, "uninstall", OP_RELEASE, "--namespace", OP_RELEASE, *NO_NODE, "--wait",
             "--timeout", "2m")  # fmt: skip
        cp.kubectl("delete", "namespace", watched, "--wait=false", check=False)


def other_live_operators(cp: ControlPlane) -> list[str]:
    """Peers of any ClusterKopfPeering seen within their lifetime: a cluster-wide tuneop
    operator (e.g. the e2e harness's) that would also reconcile our TuningJob."""
    peerings = json.loads(cp.kubectl("get", "clusterkopfpeerings", "-o", "json").stdout)
    now = dt.datetime.now(dt.UTC)
    live = []
    for item in peerings["items"]:
        for peer, info in (item.get("status") or {}).items():
            if not isinstance(info, dict) or "lastseen" not in info:
                continue
            seen = dt.datetime.fromisoformat(str(info["lastseen"]).replace("Z", "+00:00"))
            if seen.tzinfo is None:
                seen = seen.replace(tzinfo=dt.UTC)
            if (now - seen).total_seconds() < float(info.get("lifetime", 60)):
                live.append(f"{item['metadata']['name']}/{peer}")
    return live


def on_the_real_node(node: KubeletNode, release: str, watched: str) -> dict[str, Any]:
    """Chart values: two replicas on the real node, watching one namespace."""
    return {
        "replicaCount": 2,
        "tolerations": [TOLERATION],
        "nodeSelector": {"kubernetes.io/hostname": node.config.name},
        "operator": {"watchNamespaces": [watched], "peeringName": release, "logLevel": "DEBUG"},
    }


@dataclasses.dataclass
class ChartRelease:
    """A release of the chart on the local cluster, watching one namespace of its own."""

    cp: ControlPlane
    name: str
    watched: str
    health_port: int = dataclasses.field(default_factory=free_port)
    metrics_port: int = dataclasses.field(default_factory=free_port)

    def install(self, values: dict[str, Any], tmp_path: Path) -> None:
        self.cp.kubectl("create", "namespace", self.watched, check=False)
        helm(self.cp, "uninstall", self.name, "--namespace", self.name, check=False)
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        helm(
            self.cp, "install", self.name, str(CHART), "--namespace", self.name,
            "--create-namespace", "--values", str(path),
            "--set", f"health.port={self.health_port}",
            "--set", f"metrics.port={self.metrics_port}",
        )  # fmt: skip

    def uninstall(self) -> None:
        # TuningJobs deleted while the operator still runs, so kopf's finalizer is released.
        self.cp.kubectl("-n", self.watched, "delete", "tj", "--all", "--timeout=90s", check=False)
        helm(self.cp, "uninstall", self.name, "--namespace", self.name, "--wait", "--timeout", "2m",
             "--ignore-not-found")  # fmt: skip
        self.cp.kubectl("delete", "clusterkopfpeering", self.name, "--ignore-not-found")
        self.cp.kubectl("delete", "namespace", self.watched, "--wait=false", check=False)

    def can(self, *args: str) -> bool:
        sa = f"system:serviceaccount:{self.name}:{self.name}"
        result = self.cp.kubectl("auth", "can-i", *args, "--as", sa, check=False)
        return result.stdout.strip() == "yes"

    def running_pods(self) -> list[dict[str, str]] | None:
        """Both operator pods, once Running with an IP: name, phase, ip, node."""
        out = self.cp.kubectl(
            "-n", self.name, "get", "pods", "-l", f"app.kubernetes.io/instance={self.name}",
            "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.status.podIP}"
            " {.spec.nodeName}{'\\n'}{end}",
        ).stdout.splitlines()  # fmt: skip
        keys = ("name", "phase", "ip", "node")
        pods = [dict(zip(keys, line.split(), strict=False)) for line in out]
        running = [p for p in pods if p.get("phase") == "Running" and p.get("ip")]
        return running if len(running) == 2 else None

    def wait(self, predicate: Any, timeout: float, what: str) -> Any:
        """wait_for, failing with the operator pods and their logs."""
        try:
            return wait_for(predicate, timeout, what, every=1.0)
        except TimeoutError as err:
            pods = self.cp.kubectl("-n", self.name, "get", "pods", "-o", "wide", check=False)
            logs = self.cp.kubectl("-n", self.name, "logs", "-l",
                                   f"app.kubernetes.io/instance={self.name}", "--tail=40",
                                   check=False)  # fmt: skip
            raise AssertionError(f"{err}\n{pods.stdout}\n{logs.stdout}{logs.stderr}") from None

    def answers(self, pods: list[dict[str, str]], port: int, path: str) -> bytes | None:
        """The bodies of every pod's `path` joined, or None while one does not answer 200."""
        bodies = b""
        with contextlib.suppress(OSError):
            for pod in pods:
                url = f"http://{pod['ip']}:{port}{path}"
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status != 200:
                        return None
                    bodies += response.read()
            return bodies
        return None

    def joined(self, pods: list[dict[str, str]]) -> bool:
        status = self.cp.kubectl("-n", self.watched, "get", "kopfpeering", self.name,
                                 "-o", "jsonpath={.status}").stdout  # fmt: skip
        return all(pod["name"] in status for pod in pods)

    def job_phase(self, name: str) -> str:
        return str(self.cp.kubectl("-n", self.watched, "get", "tj", name,
                                   "-o", "jsonpath={.status.phase}").stdout.strip())  # fmt: skip


NAMESPACED_RIGHTS = [
    ("watch", "tuningjobs.tuneop.io"),
    ("create", "pods"),
    ("patch", "configmaps"),
    ("watch", "kopfpeerings.kopf.dev"),
]


def sample_on(node: KubeletNode, namespace: str) -> str:
    """The sample TuningJob in `namespace`, its trainer a container of the CPU image on
    `node`."""
    job = yaml.safe_load((MANIFESTS / "samples" / "tuningjob-emg.yaml").read_text())
    job["metadata"]["namespace"] = namespace
    job["spec"].update(
        image=f"tuneop/trainer:{APP_VERSION}-cpu",
        tolerations=[TOLERATION],
        nodeSelector={"kubernetes.io/hostname": node.config.name},
    )
    return str(yaml.safe_dump(job))


def test_the_charts_deployment_runs_the_operator_in_the_cluster(
    cluster: LocalCluster, real_node: KubeletNode, tmp_path: Path
) -> None:
    """`helm install` with the chart's two replicas, each a real container of the
    `tuneop/operator` image on a real node (containerd, the kubelet): each runs `python -m
    tuneop` with in-cluster credentials (its ServiceAccount token through the
    `kubernetes` Service), serves its liveness endpoint and joins the chart's KopfPeering
    under its pod name (POD_ID); the sample TuningJob, its trainer a container of the CPU
    trainer image on the same node, runs to completion. It watches only a namespace of
    its own: its rights on TuningJobs and their children are a Role there, cluster-wide
    only the cluster-scoped reads."""
    cp = cluster.control_plane
    apply_crds(cp)
    release = ChartRelease(cp, "tuneop-e2e-pod", "tuneop-e2e-pod-watched")
    release.install(on_the_real_node(real_node, release.name, release.watched), tmp_path)
    try:
        for verb, resource in NAMESPACED_RIGHTS:
            assert release.can(verb, resource, "-n", release.watched), (verb, resource)
            assert not release.can(verb, resource, "-n", "default"), (verb, resource)
        assert release.can("get", "nodes") and release.can("watch", "namespaces")
        assert not release.can("create", "clusterkopfpeerings.kopf.dev")
        pods = release.wait(release.running_pods, 120, "both operator pods Running")
        assert {p["node"] for p in pods} == {real_node.config.name}, pods
        image = cp.kubectl("-n", release.name, "get", "pod", pods[0]["name"], "-o",
                           "jsonpath={.status.containerStatuses[0].image}").stdout  # fmt: skip
        assert image == f"docker.io/tuneop/operator:{APP_VERSION}", image
        healthy = lambda: release.answers(pods, release.health_port, "/healthz") is not None  # noqa: E731
        release.wait(healthy, 180, "both operator pods' /healthz")
        release.wait(lambda: release.joined(pods), 60, "both pods in the KopfPeering status")
        assert b"tuneop_" in (release.answers(pods, release.metrics_port, "/metrics") or b"")
        # A TuningJob in the watched namespace runs to completion under this operator:
        # its children are created with the chart's RBAC, and the trainer reports
        # progress with its Role.
        # The suite runs this before any test that starts the e2e harness's operator
        # (the cluster's modules run in name order, in one worker): keep it that way.
        if other_live_operators(cp):
            pytest.skip("another cluster-wide tuneop operator is live in this session")
        cp.kubectl("apply", "-f", "-", input=sample_on(real_node, release.watched))
        done = ("Succeeded", "Failed")
        release.wait(lambda: release.job_phase("emg-cnn") in done, 300, "the sample to finish")
        status = cp.kubectl("-n", release.watched, "get", "tj", "emg-cnn", "-o", "json").stdout
        assert '"phase": "Succeeded"' in status and '"bestTrial"' in status, status
        for pod in pods:
            logs = cp.kubectl("-n", release.name, "logs", pod["name"], check=False)
            assert logs.returncode == 0, logs.stderr
            assert "Forbidden" not in logs.stdout and " 403 " not in logs.stdout, logs.stdout
        _uninstalled_with_a_running_job_its_namespace_can_be_deleted(release, real_node)
    finally:
        release.uninstall()


def _uninstalled_with_a_running_job_its_namespace_can_be_deleted(
    release: ChartRelease, node: KubeletNode
) -> None:
    """`helm uninstall` while a job runs, its TuningJobs not deleted first: the
    pre-delete hook stops the operator and releases its finalizer (the jobs stay, the
    running one keeps its trainer), so deleting the namespace then takes the jobs and
    their pods with it."""
    cp, ns = release.cp, release.watched
    running = sample_on(node, ns).replace("name: emg-cnn", "name: emg-cnn-running", 1)
    cp.kubectl("apply", "-f", "-", input=running)
    release.wait(lambda: release.job_phase("emg-cnn-running") == "Running", 180, "it runs")
    helm(release.cp, "uninstall", release.name, "--namespace", release.name, "--wait",
         "--timeout", "4m")  # fmt: skip
    jobs = json.loads(cp.kubectl("-n", ns, "get", "tj", "-o", "json").stdout)["items"]
    assert "emg-cnn-running" in [j["metadata"]["name"] for j in jobs]
    assert all(not j["metadata"].get("finalizers") for j in jobs), jobs
    trainer = json.loads(cp.kubectl("-n", ns, "get", "pod", "emg-cnn-running-worker-0",
                                    "-o", "json").stdout)  # fmt: skip
    assert trainer["status"]["phase"] == "Running", trainer["status"]  # not stopped by it
    assert "deletionTimestamp" not in trainer["metadata"], trainer["metadata"]
    cp.kubectl("delete", "namespace", ns, "--wait", "--timeout=180s")
    gone = cp.kubectl("get", "namespace", ns, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, gone.stdout
