"""The Helm chart (charts/tuneop) and the plain manifests rendered from it.

Real tools, no cluster: helm and kubeconform from the local-cluster binary cache
(tests/localcluster/tools.py; built by `make cluster-tools`), and kubeconform's strict
schemas for the pinned Kubernetes version generated offline by hack/kubeconform_schemas.py
from the k8s.io/kubernetes module's swagger.json. The TuningJob's schema is provided from
our CRD (so the samples are validated too); ServiceMonitor and PrometheusRule, whose CRDs
belong to prometheus-operator, are skipped by kubeconform and checked structurally here
(their rules by promtool in test_alerts.py).
"""

from __future__ import annotations

import copy
import dataclasses
import filecmp
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.localcluster import tools
from tests.unit.rbac_rules import triples

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tuneop"
MANIFESTS = ROOT / "manifests"
RENDERED_DIRS = ("rbac", "operator", "prometheus", "admission")
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
STANDARD_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
)
# Every optional part of the chart, one values toggle each.
TOGGLES = {
    "serviceMonitor": (["metrics.serviceMonitor.enabled=true"], "ServiceMonitor", True),
    "trainerPodMonitor": (["metrics.trainerPodMonitor.enabled=true"], "PodMonitor", True),
    "prometheusRule": (["prometheusRule.enabled=true"], "PrometheusRule", True),
    "grafanaDashboard": (["grafana.dashboard.enabled=true"], "ConfigMap", True),
    "admission": (["admission.enabled=true"], "ValidatingAdmissionPolicy", True),
    "no-metrics-service": (["metrics.service.enabled=false"], "Service", False),
    "no-rbac": (["rbac.create=false"], "ClusterRole", False),
    "no-pdb": (["podDisruptionBudget.enabled=false"], "PodDisruptionBudget", False),
    "no-serviceaccount": (
        ["serviceAccount.create=false", "serviceAccount.name=existing"],
        "ServiceAccount",
        False,
    ),
}
ALL_ON = [
    "metrics.serviceMonitor.enabled=true",
    "metrics.trainerPodMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "grafana.dashboard.enabled=true",
    "admission.enabled=true",
]
MONITORING_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")  # prometheus-operator


# --- tools -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bin_dir() -> Path:
    return tools.bin_dir(build=True)


@pytest.fixture(scope="module")
def helm(bin_dir: Path) -> str:
    return str(bin_dir / "helm")


@pytest.fixture(scope="module")
def kube_schemas() -> Path:
    """kubeconform schemas for the pinned Kubernetes version plus the TuningJob's."""
    digest = tools.version_key() + "-" + _file_digest(ROOT / "hack" / "kubeconform_schemas.py")
    out = tools.cache_dir() / "kubeconform-schemas" / digest
    subprocess.run(
        [sys.executable, str(ROOT / "hack" / "kubeconform_schemas.py"), str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


@pytest.fixture(scope="module")
def schema_dirs(kube_schemas: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    crd_schemas = tmp_path_factory.mktemp("crd-schemas")
    for crd_file in sorted((MANIFESTS / "crd").glob("*.yaml")):
        for crd in yaml.safe_load_all(crd_file.read_text()):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                write_crd_schemas(crd, crd_schemas)
    return [kube_schemas, crd_schemas]


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:10]


def write_crd_schemas(crd: dict[str, Any], out: Path) -> None:
    """A CRD's openAPIV3Schema as kubeconform's strict JSON schema (what
    openapi2jsonschema does for CRDs): unknown fields rejected unless the schema
    preserves them, `nullable` allows null, OpenAPI 3.0's boolean exclusive bounds become
    draft-07 numbers."""
    group = crd["spec"]["group"]
    kind = crd["spec"]["names"]["kind"]
    for version in crd["spec"]["versions"]:
        schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
        # The API server allows these on every object whether the schema lists them or not.
        props = schema.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
        schema = _strict(schema)
        schema["$schema"] = "http://json-schema.org/draft-07/schema#"
        name = f"{kind.lower()}-{group.split('.')[0]}-{version['name']}.json"
        (out / name).write_text(json.dumps(schema))


def _strict(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if "properties" in node:
        node["properties"] = {k: _strict(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _strict(node["additionalProperties"])
    if "items" in node:
        node["items"] = _strict(node["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            node[key] = [_strict(v) for v in node[key]]
    for bound, exclusive in (("maximum", "exclusiveMaximum"), ("minimum", "exclusiveMinimum")):
        if node.get(exclusive) is True:  # OpenAPI 3.0 boolean -> draft-07 number
            node[exclusive] = node.pop(bound)
        elif node.get(exclusive) is False:
            del node[exclusive]
    if node.pop("nullable", False):
        return {"anyOf": [node, {"type": "null"}]}
    return node


def kubeconform_cmd(bin_dir: Path, schema_dirs: list[Path]) -> list[str]:
    cmd = [str(bin_dir / "kubeconform"), "-strict", "-output", "json"]
    for d in schema_dirs:
        cmd += ["-schema-location", str(d) + "/{{ .ResourceKind }}{{ .KindSuffix }}.json"]
    return cmd


def kubeconform(
    bin_dir: Path, schema_dirs: list[Path], paths: list[Path], skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    cmd = [*kubeconform_cmd(bin_dir, schema_dirs), "-summary", "-verbose"]
    if skip:
        cmd += ["-skip", ",".join(skip)]
    result = subprocess.run(cmd + [str(p) for p in paths], capture_output=True, text=True)
    report: dict[str, Any] = json.loads(result.stdout)
    assert result.returncode == 0, json.dumps(report["resources"], indent=1)
    return report


# --- helm --------------------------------------------------------------------------------
KUBE_VERSION = tools.helm_kube_version()


def template(helm: str, *sets: str, crds: bool = False, hooks: bool = False) -> str:
    """The chart as `helm install` creates it; `hooks`: with the objects of its hooks
    (the uninstall Job, created only by `helm uninstall`)."""
    cmd = [helm, "template", "tuneop", str(CHART), "--namespace", "tuneop-system", *KUBE_VERSION]
    for s in sets:
        cmd += ["--set", s]
    if crds:
        cmd.append("--include-crds")
    if not hooks:
        cmd.append("--no-hooks")
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def objects(rendered: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def by_kind(rendered: str) -> dict[str, dict[str, Any]]:
    """Objects by kind; the chart renders one of each kind (KopfPeering, Role and
    RoleBinding aside: one per watched namespace)."""
    out: dict[str, dict[str, Any]] = {}
    for obj in objects(rendered):
        if obj["kind"] not in ("KopfPeering", "Role", "RoleBinding"):
            assert obj["kind"] not in out, f"two {obj['kind']} objects"
            out[obj["kind"]] = obj
    return out


def helm_error(helm: str, *sets: str) -> str:
    cmd = [helm, "template", "tuneop", str(CHART), *KUBE_VERSION]
    for s in sets:
        cmd += ["--set", s]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode != 0, f"helm accepted {sets}"
    return result.stderr


def test_helm_lint_strict(helm: str) -> None:
    for sets in [[]] + [t[0] for t in TOGGLES.values()] + [ALL_ON]:
        cmd = [helm, "lint", "--strict", str(CHART)]
        for s in sets:
            cmd += ["--set", s]
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, (sets, result.stdout, result.stderr)
        assert "0 chart(s) failed" in result.stdout


def test_default_values_render_the_operator_only(helm: str) -> None:
    kinds = sorted(obj["kind"] for obj in objects(template(helm)))
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ]


def test_chart_refuses_a_cluster_older_than_its_admission_policy(helm: str) -> None:
    """kubeVersion: helm names the constraint on a 1.29 cluster, and takes the
    pre-release suffix managed clusters report."""
    cmd = [helm, "template", "tuneop", str(CHART), "--kube-version"]
    old = subprocess.run([*cmd, "v1.29.9"], capture_output=True, text=True)
    assert old.returncode != 0
    assert "requires kubeVersion: >=1.30.0-0" in old.stderr, old.stderr
    managed = subprocess.run([*cmd, "v1.30.2-eks-1552ad0"], capture_output=True, text=True)
    assert managed.returncode == 0, managed.stderr


@pytest.mark.parametrize("toggle", sorted(TOGGLES))
def test_each_toggle(helm: str, toggle: str) -> None:
    sets, kind, present = TOGGLES[toggle]
    default = {obj["kind"] for obj in objects(template(helm))}
    toggled = by_kind(template(helm, *sets))
    assert (kind in toggled) is present
    assert (kind in default) is not present
    if toggle == "no-rbac":
        assert "ClusterRoleBinding" not in toggled
    if toggle == "admission":
        assert {"ValidatingAdmissionPolicyBinding", "ConfigMap"} <= toggled.keys()
    if toggle == "no-serviceaccount":
        pod = toggled["Deployment"]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "existing"
        assert toggled["ClusterRoleBinding"]["subjects"][0]["name"] == "existing"


def test_service_monitor_selects_the_metrics_service(helm: str) -> None:
    objs = by_kind(template(helm, "metrics.serviceMonitor.enabled=true"))
    monitor, service = objs["ServiceMonitor"], objs["Service"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    assert endpoint["path"] == "/metrics"
    # The operator's metrics carry the TuningJob's `namespace` label: keep it.
    assert endpoint["honorLabels"] is True
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["tuneop-system"]


def test_trainer_pod_monitor_selects_the_pods_the_operator_builds(helm: str) -> None:
    """Cross-checked with the operator's own pod builder: labels and port name."""
    from tuneop.render import trainer_pods
    from tuneop_contract.spec import JobSpec

    job = {
        "apiVersion": "tuneop.io/v1alpha1",
        "kind": "TuningJob",
        "metadata": {"name": "emg", "namespace": "ml", "uid": "u-1", "generation": 1},
        "spec": {"image": "tuneop/trainer:0.1.0", "hypermodel": "m:H"},
    }
    pod = trainer_pods.build_pod(job, JobSpec.from_dict(job["spec"]), 0, 0)
    monitor = by_kind(template(helm, "metrics.trainerPodMonitor.enabled=true"))["PodMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    port_names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    assert endpoint["port"] in port_names
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    scoped = by_kind(
        template(helm, "metrics.trainerPodMonitor.enabled=true", "operator.watchNamespaces={ml}")
    )["PodMonitor"]
    assert scoped["spec"]["namespaceSelector"] == {"matchNames": ["ml"]}


def test_service_monitor_needs_the_service(helm: str) -> None:
    err = helm_error(helm, "metrics.serviceMonitor.enabled=true", "metrics.service.enabled=false")
    assert "metrics.serviceMonitor.enabled needs metrics.service.enabled" in err


def test_prometheus_rule_settings_reach_the_rules(helm: str) -> None:
    rule = by_kind(
        template(
            helm,
            "prometheusRule.enabled=true",
            "prometheusRule.preemptionStorm.threshold=9",
            "prometheusRule.preemptionStorm.window=30m",
            "prometheusRule.operatorJob=my-scrape-job",
            "prometheusRule.labels.release=kube-prometheus",
            "prometheusRule.failureBudget.ratio=1",
            "prometheusRule.jobFailed.windowSeconds=600",
            "prometheusRule.operatorDown.errorWindow=20m",
        )
    )["PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    storm = alerts["TuneopPreemptionStorm"]["expr"]
    assert "[30m:]" in storm and storm.rstrip().endswith("> 9")
    down = alerts["TuneopOperatorDown"]["expr"]
    assert 'up{job="my-scrape-job"}' in down
    assert 'tuneop_operator_leader{job="my-scrape-job"}' in down
    assert 'tuneop_reconcile_errors_total{job="my-scrape-job"}[20m]' in down
    assert ">= 1\n" in alerts["TuneopFailureBudgetLow"]["expr"]
    assert "< 600" in alerts["TuneopJobFailed"]["expr"]


def test_grafana_dashboard_configmap_carries_the_dashboard(helm: str) -> None:
    cm = by_kind(
        template(
            helm,
            "grafana.dashboard.enabled=true",
            "grafana.dashboard.namespace=monitoring",
            "grafana.dashboard.labels.team=ml",
        )
    )["ConfigMap"]
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["labels"]["team"] == "ml"
    shipped = json.loads((CHART / "dashboards" / "tuneop.json").read_text())
    assert json.loads(cm["data"]["tuneop.json"]) == shipped
    default = by_kind(template(helm, "grafana.dashboard.enabled=true"))["ConfigMap"]
    assert default["metadata"]["namespace"] == "tuneop-system"


def test_deployment_runs_two_restricted_replicas_with_probe_and_metrics(helm: str) -> None:
    deploy = by_kind(template(helm))["Deployment"]
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # Pod Security Standards, restricted profile.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["readOnlyRootFilesystem"] is True
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    probe = container["livenessProbe"]["httpGet"]
    assert probe == {"path": "/healthz", "port": "health"}
    # The pod's labels include the selector; the selector is stable across upgrades.
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    assert "app.kubernetes.io/version" not in selector and "helm.sh/chart" not in selector


def test_deployment_env_is_what_the_operator_config_reads(helm: str) -> None:
    """The TUNEOP_OPERATOR_* variables the chart sets parse with the operator's own Config."""
    from tuneop.run.config import Config

    deploy = by_kind(
        template(
            helm,
            "operator.watchNamespaces={ml,research}",
            "operator.logLevel=DEBUG",
            "metrics.port=9100",
            "health.port=9101",
            "operator.peeringName=team-a",
            "operator.requestTimeoutSeconds=12",
            "operator.errorBackoffMaxSeconds=300",
            "operator.progressIntervalSeconds=20",
            "trainer.image=registry.example.com/ml/trainer:1",
            "trainer.imagePullSecrets={ml-registry,mirror}",
            "trainer.tolerations[0].key=pool",
            "trainer.tolerations[0].operator=Exists",
            "trainer.priorityClassName=tuning-low",
        )
    )["Deployment"]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    # A writable temp dir under the read-only root filesystem.
    assert {m["mountPath"] for m in container["volumeMounts"]} == {env.pop("TMPDIR")}
    assert all(name.startswith("TUNEOP_OPERATOR_") for name in env)
    pod_id = next(e for e in container["env"] if e["name"] == "POD_ID")  # kopf peer identity
    assert pod_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    config = Config.from_env(env)
    assert config.namespaces == ("ml", "research")
    assert config.log_level == "DEBUG"
    assert (config.metrics_port, config.health_port) == (9100, 9101)
    assert config.peering_name == "team-a"
    assert (config.request_timeout_seconds, config.error_backoff_max_seconds) == (12, 300)
    assert config.progress_interval_seconds == 20
    trainer = config.trainer_defaults
    assert trainer.image == "registry.example.com/ml/trainer:1"
    assert trainer.image_pull_secrets == ("ml-registry", "mirror")
    assert trainer.tolerations == ({"key": "pool", "operator": "Exists"},)
    assert trainer.priority_class_name == "tuning-low"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9100, "health": 9101}

    default_env = {
        e["name"]: e["value"]
        for e in by_kind(template(helm))["Deployment"]["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
        if "value" in e
    }
    default = Config.from_env(default_env)
    assert default.namespaces == () and default.peering_name == "tuneop"
    assert (default.metrics_port, default.health_port) == (8080, 8081)
    assert default.request_timeout_seconds == Config.request_timeout_seconds  # one default
    assert default.error_backoff_max_seconds == Config.error_backoff_max_seconds
    assert default.progress_interval_seconds == Config.progress_interval_seconds
    # the trainer image beside the operator's; no other trainer default
    assert default.trainer_defaults == dataclasses.replace(
        Config().trainer_defaults, image=f"tuneop/trainer:{APP_VERSION}"
    )
    moved = by_kind(template(helm, "image.repository=registry.example.com/ml/operator",
                             "image.tag=2.0"))["Deployment"]  # fmt: skip
    env = {
        e["name"]: e.get("value") for e in moved["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TUNEOP_OPERATOR_TRAINER_IMAGE"] == "registry.example.com/ml/trainer:2.0"


def test_namespaced_mode_creates_a_kopf_peering_per_watched_namespace(helm: str) -> None:
    """kopf keeps its watches paused while a namespaced peering object is missing."""
    rendered = objects(template(helm, "operator.watchNamespaces={ml,research}"))
    peerings = [o for o in rendered if o["kind"] == "KopfPeering"]
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in peerings] == [
        ("ml", "tuneop"),
        ("research", "tuneop"),
    ]
    assert peerings[0]["apiVersion"] == "kopf.dev/v1"
    standalone = template(
        helm, "operator.watchNamespaces={ml}", "operator.peeringName=", "replicaCount=1"
    )
    assert "KopfPeering" not in {o["kind"] for o in objects(standalone)}
    # Cluster-wide: the operator creates its ClusterKopfPeering itself.
    assert "KopfPeering" not in {o["kind"] for o in objects(template(helm))}


def test_disruption_budget_keeps_a_standby_replica(helm: str) -> None:
    objs = by_kind(template(helm))
    pdb, deploy = objs["PodDisruptionBudget"], objs["Deployment"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"] == deploy["spec"]["selector"]
    single = {o["kind"] for o in objects(template(helm, "replicaCount=1"))}
    assert "PodDisruptionBudget" not in single  # would block every drain


def _hook(helm: str, *sets: str) -> list[dict[str, Any]]:
    return [o for o in objects(template(helm, *sets, hooks=True))
            if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]  # fmt: skip


def test_the_uninstall_hook_stops_the_operator_and_may_only_release_tuningjobs(
    helm: str,
) -> None:
    """A pre-delete Job of the operator image runs tuneop.run.uninstall; its rights,
    made before it and deleted after it: this release's Deployment scale and pods, and
    get/list/patch of TuningJobs; its pod is not one the Deployment selects."""
    hook = _hook(helm)
    assert {o["metadata"]["annotations"]["helm.sh/hook"] for o in hook} == {"pre-delete"}
    (job,) = [o for o in hook if o["kind"] == "Job"]
    deploy = by_kind(template(helm))["Deployment"]
    pod = job["spec"]["template"]
    assert pod["spec"]["containers"][0]["image"] == deploy["spec"]["template"]["spec"][
        "containers"][0]["image"]  # fmt: skip
    assert pod["spec"]["containers"][0]["command"][:3] == ["python", "-m", "tuneop.run.uninstall"]
    assert f"--deployment={deploy['metadata']['name']}" in pod["spec"]["containers"][0]["command"]
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= pod["metadata"]["labels"].items()
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in hook}
    assert max(w for k, w in weights.items() if k != "Job") < weights["Job"]
    rules = {o["kind"]: o["rules"] for o in hook if "rules" in o}
    assert rules["ClusterRole"] == [
        {"apiGroups": ["tuneop.io"], "resources": ["tuningjobs"], "verbs": ["get", "list", "patch"]}
    ]
    name = deploy["metadata"]["name"]
    assert [(r["resources"], r.get("resourceNames"), r["verbs"]) for r in rules["Role"]] == [
        (["deployments"], [name], ["get"]),
        (["deployments/scale"], [name], ["patch"]),
        (["pods"], None, ["list"]),
    ]
    namespaced = _hook(helm, "operator.watchNamespaces={ml,research}")
    assert "ClusterRole" not in {o["kind"] for o in namespaced}
    job_roles = [o for o in namespaced if o["kind"] == "Role" and o["rules"][0]["resources"] == [
        "tuningjobs"]]  # fmt: skip
    assert sorted(o["metadata"]["namespace"] for o in job_roles) == ["ml", "research"]
    assert _hook(helm, "uninstall.releaseJobs=false") == []
    assert _hook(helm, "rbac.create=false") == []  # a Job without rights would fail uninstall
    command = pod["spec"]["containers"][0]["command"]
    assert f"--timeout={job['spec']['activeDeadlineSeconds'] - 30}" in command
    rbac = [o for o in hook if o["kind"] != "Job"]
    assert all("hook-failed" in o["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
               for o in rbac)  # fmt: skip
    long = _hook(helm, "fullnameOverride=" + "x" * 63)
    assert max(len(o["metadata"]["name"]) for o in long if o["kind"] == "Job") <= 63


def test_two_replicas_need_peering(helm: str) -> None:
    err = helm_error(helm, "operator.peeringName=")
    assert "operator.peeringName is empty" in err
    single = by_kind(template(helm, "operator.peeringName=", "replicaCount=1"))["Deployment"]
    assert single["spec"]["replicas"] == 1


def test_every_object_has_the_standard_labels(helm: str) -> None:
    for obj in objects(template(helm, *ALL_ON)):
        labels = obj["metadata"]["labels"]
        for key in STANDARD_LABELS:
            assert key in labels, (obj["kind"], key)
        assert labels["app.kubernetes.io/instance"] == "tuneop"


def test_labels_come_only_from_helpers() -> None:
    for path in (CHART / "templates").glob("*.yaml"):
        assert "app.kubernetes.io/" not in path.read_text(), path.name
        assert "helm.sh/chart" not in path.read_text(), path.name


def test_clusterrole_is_exactly_the_operators_rules(helm: str) -> None:
    """Cluster-wide: one ClusterRole equal to OPERATOR_RULES
    (operator/tuneop/render/rbac.py), nothing missing, nothing more. With watched
    namespaces: a Role (and RoleBinding) in each with NAMESPACED_RULES +
    NAMESPACED_PEERING_RULES, and a ClusterRole with only the cluster-scoped
    CLUSTER_RULES."""
    from tuneop.render import rbac

    cluster_wide = by_kind(template(helm))
    role = cluster_wide["ClusterRole"]
    assert rbac.missing(role["rules"]) == []
    assert triples(role["rules"]) == triples(rbac.OPERATOR_RULES)
    assert not [o for o in objects(template(helm)) if o["kind"] in ("Role", "RoleBinding")]

    rendered = objects(template(helm, "operator.watchNamespaces={ml,research}"))
    (cluster,) = [o for o in rendered if o["kind"] == "ClusterRole"]
    assert triples(cluster["rules"]) == triples(rbac.CLUSTER_RULES)
    roles = [o for o in rendered if o["kind"] == "Role"]
    bindings = [o for o in rendered if o["kind"] == "RoleBinding"]
    assert [r["metadata"]["namespace"] for r in roles] == ["ml", "research"]
    needed = [*rbac.NAMESPACED_RULES, *rbac.NAMESPACED_PEERING_RULES]
    for namespaced in roles:
        assert rbac.missing(namespaced["rules"], needed) == []
        assert triples(namespaced["rules"]) == triples(needed)
    account = cluster_wide["ServiceAccount"]["metadata"]
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": roles[0]["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["name"], "namespace": "tuneop-system"}
        ]
    assert [b["metadata"]["namespace"] for b in bindings] == ["ml", "research"]
    no_rbac = objects(template(helm, "operator.watchNamespaces={ml}", "rbac.create=false"))
    assert not [o for o in no_rbac if o["kind"] in ("Role", "RoleBinding", "ClusterRole")]
    # Least privilege: no wildcards, no secrets, no escalate/bind/impersonate, no update
    # but the finalizers subresource (owner references with blockOwnerDeletion).
    granted = triples(role["rules"]) | {t for r in roles for t in triples(r["rules"])}
    assert not any("*" in item for triple in granted for item in triple)
    assert not any(resource == "secrets" for _, resource, _ in granted)
    assert not any(verb in ("escalate", "bind", "impersonate") for *_, verb in granted)
    assert {r for _, r, v in granted if v == "update"} == {"tuningjobs/finalizers"}


# --- admission policy -------------------------------------------------------------------
ADMISSION_LIMITS = [
    "admission.enabled=true",
    "admission.allowedImages={registry.example.com/ml/,ghcr.io/acme/}",
    "admission.allowedPriorityClasses={tuneop-preemptible}",
    "admission.maxGpusPerJob=8",
    "admission.allowedTolerationKeys={example.com/spot}",
]


def test_admission_limits_reach_the_params_configmap_not_the_expressions(helm: str) -> None:
    """The limits are data (the policy's paramKind ConfigMap), so an admin changes them by
    editing that ConfigMap; the policy's expressions name no limit."""
    objs = by_kind(template(helm, *ADMISSION_LIMITS))
    policy, binding, params = (
        objs["ValidatingAdmissionPolicy"],
        objs["ValidatingAdmissionPolicyBinding"],
        objs["ConfigMap"],
    )
    assert params["metadata"]["namespace"] == "tuneop-system"
    assert params["data"] == {
        "allowedImages": "registry.example.com/ml/,ghcr.io/acme/",
        "allowedPriorityClasses": "tuneop-preemptible",
        "maxGpusPerJob": "8",
        "allowedTolerationKeys": "example.com/spot",
    }
    spec = policy["spec"]
    assert spec["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["tuneop.io"] and rule["resources"] == ["tuningjobs"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    expressions = yaml.safe_dump(spec)
    for limit in ("registry.example.com", "ghcr.io", "tuneop-preemptible", "example.com/spot"):
        assert limit not in expressions
    # Every validation says which field and what is allowed.
    fields = ["spec.image", "spec.priorityClassName", "spec.distribution", "spec.resources"]
    fields += ["spec.tolerations", "spec.template.spec.initContainers"]
    for validation, field in zip(spec["validations"], fields, strict=True):
        assert field in validation["messageExpression"], validation
        assert validation["reason"] == "Forbidden"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["paramRef"] == {
        "name": params["metadata"]["name"],
        "namespace": "tuneop-system",
        "parameterNotFoundAction": "Deny",
    }
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {}


def test_admission_binding_takes_the_namespace_selector(helm: str) -> None:
    binding = by_kind(
        template(
            helm, "admission.enabled=true", "admission.namespaceSelector.matchLabels.gpu=shared"
        )
    )["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"gpu": "shared"}
    }


def test_admission_defaults_are_no_limits(helm: str) -> None:
    params = by_kind(template(helm, "admission.enabled=true"))["ConfigMap"]
    assert params["data"] == {
        "allowedImages": "",
        "allowedPriorityClasses": "",
        "maxGpusPerJob": "0",
        "allowedTolerationKeys": "",
    }


# --- values.schema.json --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["replicaCount=-1"], "at '/replicaCount': minimum: got -1, want 0"),
        (["image.pullPolicy=Sometimes"], "at '/image/pullPolicy': value must be one of"),
        (["replicas=3"], "additional properties 'replicas' not allowed"),
        (["metrics.port=70000"], "at '/metrics/port': maximum: got 70,000, want 65,535"),
        (["operator.logLevel=LOUD"], "at '/operator/logLevel': value must be one of"),
        (["prometheusRule.preemptionStorm.window=soon"], "'soon' does not match pattern"),
        (["prometheusRule.failureBudget.ratio=2"], "at '/prometheusRule/failureBudget/ratio'"),
        (["operator.watchNamespaces={Bad_NS}"], "at '/operator/watchNamespaces/0'"),
        (["operator.requestTimeoutSeconds=0"], "at '/operator/requestTimeoutSeconds': minimum"),
        (["operator.errorBackoffMaxSeconds=1e6"], "at '/operator/errorBackoffMaxSeconds'"),
        (["admission.maxGpusPerJob=-1"], "at '/admission/maxGpusPerJob': minimum: got -1"),
        (["admission.allowedImages={a b}"], "at '/admission/allowedImages/0'"),
        (["admission.allowedImage=x"], "additional properties 'allowedImage' not allowed"),
    ],
)
def test_values_schema_rejects_bad_values_clearly(helm: str, sets: list[str], message: str) -> None:
    err = helm_error(helm, *sets)
    assert "values don't meet the specifications of the schema" in err
    assert message in err, err


def test_values_schema_describes_every_default_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, node: dict[str, Any], path: str) -> Iterator[str]:
        if "description" not in node and path:
            yield f"{path}: no description"
        props = node.get("properties")
        if isinstance(value, dict) and props is not None:
            for key, sub in value.items():
                if key not in props:
                    yield f"{path}.{key}: not in the schema"
                else:
                    yield from walk(sub, props[key], f"{path}.{key}")

    assert list(walk(values, schema, "")) == []


# --- kubeconform ------------------------------------------------------------------------
def test_kubeconform_strict_default_and_all_toggles(
    helm: str, bin_dir: Path, schema_dirs: list[Path], tmp_path: Path
) -> None:
    namespaced = [*ALL_ON, "operator.watchNamespaces={ml,research}"]
    for name, sets in {"default": [], "all-on": ALL_ON, "namespaced": namespaced}.items():
        out = tmp_path / f"{name}.yaml"
        out.write_text(template(helm, *sets, crds=True, hooks=True))
        report = kubeconform(bin_dir, schema_dirs, [out], skip=MONITORING_KINDS)
        summary = report["summary"]
        assert summary["invalid"] == 0 and summary["errors"] == 0, report
        assert summary["valid"] >= 9  # 6 objects + 3 CRDs (TuningJob, 2 peering)


def test_kubeconform_catches_a_typo(
    helm: str, bin_dir: Path, schema_dirs: list[Path], tmp_path: Path
) -> None:
    """-strict with our schemas really rejects unknown fields (the check is not vacuous)."""
    bad = template(helm).replace("imagePullPolicy:", "imagePulPolicy:")
    out = tmp_path / "typo.yaml"
    out.write_text(bad)
    result = subprocess.run(
        [*kubeconform_cmd(bin_dir, schema_dirs), str(out)], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "imagePulPolicy" in result.stdout


def test_kubeconform_strict_plain_manifests_and_samples(
    bin_dir: Path, schema_dirs: list[Path]
) -> None:
    paths = [MANIFESTS / d for d in ("crd", "rbac", "operator", "admission", "samples")]
    paths += sorted((MANIFESTS / "prometheus").glob("*monitor.yaml"))
    paths += [MANIFESTS / "prometheus" / "prometheusrule.yaml"]
    report = kubeconform(bin_dir, schema_dirs, paths, skip=MONITORING_KINDS)
    kinds = {r["kind"] for r in report["resources"] if r["status"] == "statusValid"}
    assert {"Deployment", "ClusterRole", "Namespace", "TuningJob"} <= kinds, kinds
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds, kinds


def test_kubeconform_rejects_a_bad_sample(
    bin_dir: Path, schema_dirs: list[Path], tmp_path: Path
) -> None:
    """The TuningJob schema from our CRD is really applied: a misspelt spec field fails."""
    sample = next(
        doc
        for path in sorted((MANIFESTS / "samples").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "TuningJob"
    )
    sample["spec"]["stallTimeoutSecs"] = 60
    out = tmp_path / "bad-sample.yaml"
    out.write_text(yaml.safe_dump(sample))
    result = subprocess.run(
        [*kubeconform_cmd(bin_dir, schema_dirs), str(out)], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "stallTimeoutSecs" in result.stdout


# --- drift -------------------------------------------------------------------------------
def test_chart_crds_are_copies_of_manifests_crd() -> None:
    source = sorted(p.name for p in (MANIFESTS / "crd").glob("*.yaml"))
    copies = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert source and copies == source, "run `make manifests`"
    for name in source:
        assert filecmp.cmp(MANIFESTS / "crd" / name, CHART / "crds" / name, shallow=False), (
            f"charts/tuneop/crds/{name} differs from manifests/crd/{name}: run `make manifests`"
        )


def test_committed_manifests_match_the_chart(helm: str, tmp_path: Path) -> None:
    env = dict(os.environ, HELM=helm, PY=sys.executable)
    subprocess.run(
        ["bash", str(ROOT / "hack" / "render-manifests.sh"), str(tmp_path)],
        check=True,
        env=env,
        capture_output=True,
    )
    for sub in RENDERED_DIRS:
        fresh = sorted(p.name for p in (tmp_path / sub).iterdir())
        committed = sorted(p.name for p in (MANIFESTS / sub).iterdir())
        assert fresh == committed, f"manifests/{sub}: run `make manifests`"
        for name in fresh:
            a, b = (tmp_path / sub / name).read_text(), (MANIFESTS / sub / name).read_text()
            assert a == b, f"manifests/{sub}/{name} is stale: run `make manifests`"
    dashboard = (tmp_path / "grafana" / "tuneop-dashboard.json").read_text()
    assert dashboard == (MANIFESTS / "grafana" / "tuneop-dashboard.json").read_text()
    crd_copies = sorted(p.name for p in (tmp_path / "crd-copies").iterdir())
    assert crd_copies == sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    readme = (tmp_path / "chart-README.md").read_text()
    assert readme == (CHART / "README.md").read_text(), "charts/tuneop/README.md: make manifests"
    assert "| `prometheusRule.preemptionStorm.threshold` | integer | `5` |" in readme


def test_rendered_headers_say_generated() -> None:
    for sub in RENDERED_DIRS:
        for path in (MANIFESTS / sub).iterdir():
            first = path.read_text().splitlines()[0]
            assert re.match(r"# Generated by hack/render-manifests.sh", first), path
