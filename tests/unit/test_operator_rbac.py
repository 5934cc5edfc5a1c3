"""The operator's RBAC rules: the constant, its documentation page, and the helper that
tells what a ClusterRole lacks."""

from __future__ import annotations

from pathlib import Path

from tuneop.render import rbac

from tests.unit.rbac_rules import triples

DOC = Path(__file__).resolve().parents[2] / "docs" / "operator-rbac.md"


def _documented(text: str) -> set[tuple[str, str, str]]:
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| apiGroups") and "---" not in line
    ]
    return {
        (group.replace('""', ""), resource.strip(), verb.strip())
        for group, resources, verbs, _ in rows
        for resource in resources.split(",")
        for verb in verbs.split(",")
    }


def test_doc_lists_exactly_the_rules():
    cluster_wide, rest = DOC.read_text().split("## Namespaced mode")
    namespaced = rest.split("\n## ")[0]  # the sections after it are other accounts'
    assert _documented(cluster_wide) == triples(rbac.OPERATOR_RULES)
    assert _documented(namespaced) == triples(rbac.NAMESPACED_PEERING_RULES)
    parts = [*rbac.NAMESPACED_RULES, *rbac.CLUSTER_RULES, *rbac.CLUSTER_PEERING_RULES]
    assert parts == rbac.OPERATOR_RULES
    assert len(rbac.NAMESPACED_RULES) == 9  # "the first nine above"


def test_missing_reports_what_a_role_lacks():
    assert rbac.missing(rbac.OPERATOR_RULES) == []
    assert rbac.missing([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]) == []
    without_delete = [
        {**r, "verbs": [v for v in r["verbs"] if v != "delete"]} for r in rbac.OPERATOR_RULES
    ]
    assert "tuneop.io/tuningjobs: delete" in rbac.missing(without_delete)
    assert "core/pods: delete" in rbac.missing(without_delete)


def test_the_operator_holds_what_it_grants_each_trainer_and_the_trainer_no_tuningjob():
    """RBAC's escalation check: a Role may only grant what its creator holds."""
    from tuneop.render import children

    rule = children.TRAINER_RULE
    for group in rule["apiGroups"]:
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                assert rbac.granted(rbac.OPERATOR_RULES, group, resource, verb), verb
    role = children.build_role({"metadata": {"name": "j", "namespace": "ns", "uid": "u"}})
    (trainer,) = role["rules"]
    assert trainer["resourceNames"] == ["j-progress"]
    for resource in ("tuningjobs", "tuningjobs/status"):
        assert not rbac.granted(role["rules"], "tuneop.io", resource, "patch")
