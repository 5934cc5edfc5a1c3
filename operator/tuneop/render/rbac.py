"""Exactly the RBAC rules the operator needs. Cluster-wide (no watched namespaces) they
are one ClusterRole: OPERATOR_RULES. With watched namespaces the chart grants
NAMESPACED_RULES + NAMESPACED_PEERING_RULES as a Role in each watched namespace and only
CLUSTER_RULES cluster-wide. The chart templates them (charts/tuneop/templates/
clusterrole.yaml, role.yaml); docs/operator-rbac.md explains each;
tests/unit/test_operator_rbac.py and tests/unit/test_chart.py keep the three in sync."""

from __future__ import annotations

from typing import Any

from ..api import names

NAMESPACED_RULES: list[dict[str, Any]] = [
    # TuningJobs: watch (kopf), patch (kopf finalizer/annotations), delete
    # (ttlSecondsAfterFinished). Every write is a PATCH: no `update`.
    {
        "apiGroups": [names.GROUP],
        "resources": [names.PLURAL],
        "verbs": ["get", "list", "watch", "patch", "delete"],
    },
    # Status: the operator's fields (only the operator writes them), by merge patch.
    {"apiGroups": [names.GROUP], "resources": [f"{names.PLURAL}/status"], "verbs": ["patch"]},
    # Owner references with blockOwnerDeletion on the children: the API server's
    # OwnerReferencesPermissionEnforcement checks `update` on the owner's finalizers.
    {"apiGroups": [names.GROUP], "resources": [f"{names.PLURAL}/finalizers"], "verbs": ["update"]},
    # Trainer pods: found by label, created by name, deleted on disruption/suspend;
    # patched only to declare a Kueue pod group over (one annotation).
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "delete", "patch"],
    },
    # Kueue: the Workload of a queued pod group, for its admission message.
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get"]},
    # The other children of a job.
    {
        "apiGroups": [""],
        "resources": ["services", "persistentvolumeclaims", "serviceaccounts"],
        "verbs": ["get", "create", "delete"],
    },
    # The spec and progress ConfigMaps; `list`/`watch` stream the progress maps the
    # trainers report to (the watch is filtered by their label), `get` reads the user's
    # spec.script.configMap before a pod group. `patch` only because each trainer Role
    # grants patch on its progress map (render.children.TRAINER_RULE), and RBAC lets the
    # operator grant only what it holds; the operator never patches one.
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "delete", "patch"],
    },
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": ["get", "create", "delete"],
    },
    # Events (core/v1) for every create, preemption, restore, failure, suspend, completion.
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
]
"""What the operator does in a namespace whose TuningJobs it runs."""

CLUSTER_RULES: list[dict[str, Any]] = [
    # Node state (watched): a pod whose node is gone was lost with the node, not failed.
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    # kopf: resource and namespace discovery.
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
]
"""Cluster-scoped reads, needed in both modes."""

CLUSTER_PEERING_RULES: list[dict[str, Any]] = [
    # kopf: cluster-wide peering "tuneop" (created at start-up if missing).
    {
        "apiGroups": ["kopf.dev"],
        "resources": ["clusterkopfpeerings"],
        "verbs": ["get", "list", "watch", "patch", "create"],
    },
]

NAMESPACED_PEERING_RULES: list[dict[str, Any]] = [
    # kopf: the KopfPeering the chart creates in each watched namespace.
    {
        "apiGroups": ["kopf.dev"],
        "resources": ["kopfpeerings"],
        "verbs": ["get", "list", "watch", "patch"],
    },
]

OPERATOR_RULES: list[dict[str, Any]] = [*NAMESPACED_RULES, *CLUSTER_RULES, *CLUSTER_PEERING_RULES]
"""Cluster-wide mode: the one ClusterRole."""


def granted(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    """Whether `rules` (a Role's or ClusterRole's) allow `verb` on `group`/`resource`."""
    for rule in rules:
        if (
            (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
            and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
            and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
        ):
            return True
    return False


def missing(rules: list[dict[str, Any]], needed: list[dict[str, Any]] | None = None) -> list[str]:
    """What `needed` (default OPERATOR_RULES) has that `rules` do not grant, as
    "group/resource: verb"."""
    out = []
    for rule in OPERATOR_RULES if needed is None else needed:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    if not granted(rules, group, resource, verb):
                        out.append(f"{group or 'core'}/{resource}: {verb}")
    return out
