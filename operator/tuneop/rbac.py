"""Exactly the RBAC rules the operator needs (cluster-wide; a ClusterRole). The chart
templates them (charts/tuneop/templates/clusterrole.yaml); docs/operator-rbac.md explains
each; tests/unit/test_operator_rbac.py keeps the three in sync."""

from __future__ import annotations

from typing import Any

from . import names

OPERATOR_RULES: list[dict[str, Any]] = [
    # TuningJobs: watch (kopf), patch (kopf finalizer/annotations), status (the
    # operator's status fields: only the operator writes them), delete
    # (ttlSecondsAfterFinished).
    {
        "apiGroups": [names.GROUP],
        "resources": [names.PLURAL],
        "verbs": ["get", "list", "watch", "patch", "update", "delete"],
    },
    {
        "apiGroups": [names.GROUP],
        "resources": [f"{names.PLURAL}/status"],
        "verbs": ["get", "patch", "update"],
    },
    {
        "apiGroups": [names.GROUP],
        "resources": [f"{names.PLURAL}/finalizers"],
        "verbs": ["update"],
    },
    # Trainer pods: found by label, created by name, deleted on disruption/suspend.
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "delete"],
    },
    # The other children of a job.
    {
        "apiGroups": [""],
        "resources": ["services", "persistentvolumeclaims", "serviceaccounts"],
        "verbs": ["get", "create", "delete"],
    },
    # The spec and progress ConfigMaps; `get` also reads the progress the trainer reports
    # and the user's spec.script.configMap before each pod group. `patch` only because
    # each trainer Role grants patch on its progress map (builders.TRAINER_RULE), and
    # RBAC lets the operator grant only what it holds; the operator never patches one.
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "create", "delete", "patch"],
    },
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": ["get", "create", "delete"],
    },
    # Events (core/v1) for every create, preemption, restore, failure, suspend, completion.
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    # Node state: a pod whose node is gone was lost with the node, not failed.
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    # kopf: cluster-wide peering "tuneop" (created at start-up if missing), discovery.
    {
        "apiGroups": ["kopf.dev"],
        "resources": ["clusterkopfpeerings"],
        "verbs": ["get", "list", "watch", "patch", "create"],
    },
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
]


def granted(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    """Whether `rules` (a ClusterRole's) allow `verb` on `group`/`resource`."""
    for rule in rules:
        if (
            (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
            and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
            and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
        ):
            return True
    return False


def missing(rules: list[dict[str, Any]]) -> list[str]:
    """What OPERATOR_RULES need that `rules` do not grant, as "group/resource: verb"."""
    out = []
    for rule in OPERATOR_RULES:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    if not granted(rules, group, resource, verb):
                        out.append(f"{group or 'core'}/{resource}: {verb}")
    return out
