"""tuneop's Grafana dashboard (charts/tuneop/dashboards/tuneop.json, shipped as a ConfigMap
behind grafana.dashboard.enabled; the chart side is in test_chart.py): every panel's
PromQL names only metrics the operator or the trainer export, and is valid PromQL for
the real promtool once Grafana's variables are filled in; and the JSON (the chart's and
the copy under manifests/grafana) decodes strictly into Grafana's own dashboard types
(hack/dashboard-check: grafana-foundation-sdk's generated Go types, panel and query
plugins registered)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.dashboard_queries import DASHBOARD, exprs, filled, panels
from tests.unit.metric_names import AGREED, HISTOGRAMS, OPERATOR, TRAINER

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_COPY = ROOT / "manifests" / "grafana" / "tuneop-dashboard.json"
EXPORTED = AGREED | OPERATOR | HISTOGRAMS | TRAINER
# What each required panel shows, by the metric it must read.
REQUIRED = {
    "tuneop_tuningjob_phase",
    "tuneop_tuningjob_trials_completed",
    "tuneop_tuningjob_trials_planned",
    "tuneop_tuningjob_best_score",
    "tuneop_tuningjob_preemptions_total",
    "tuneop_tuningjob_failures_total",
    "tuneop_tuningjob_stalled",
    "tuneop_tuningjob_last_progress_timestamp_seconds",
    "tuneop_tuningjob_last_checkpoint_timestamp_seconds",
    "tuneop_trainer_checkpoint_seconds_total",
    "tuneop_trainer_steps_total",
}


def test_every_panel_queries_only_exported_metrics() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "tuneop"
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel.get("targets"), panel["title"]
    used: set[str] = set()
    for title, expr in exprs():
        names = set(re.findall(r"\btuneop_[a-z_]+", expr))
        assert names, (title, expr)
        assert names <= EXPORTED, (title, names - EXPORTED)
        used |= names
        assert "$" not in filled(expr), (title, expr)
    assert used >= REQUIRED, REQUIRED - used


def test_per_job_panels_group_by_the_exported_labels() -> None:
    """Operator series are grouped by (namespace, tuningjob), trainer series (scraped from
    the pods) by (namespace, pod): the labels those series carry."""
    for title, expr in exprs():
        for grouping in re.findall(r"\bby\s*\(([^)]*)\)", expr):
            labels = {label.strip() for label in grouping.split(",")}
            assert labels in (
                {"namespace", "tuningjob"},
                {"namespace", "tuningjob", "phase"},
                {"namespace", "pod"},
                {"phase"},
                {"le", "reason"},
            ), (title, labels)


def test_every_panel_query_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    rules = [
        {"record": f"dashboard:panel_{i}", "expr": filled(expr)}
        for i, (_, expr) in enumerate(exprs())
    ]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def dashboard_check() -> str:
    """hack/dashboard-check, built once into the cache (Go and the module proxy)."""
    built = subprocess.run(
        [str(ROOT / "hack" / "dashboard-check" / "build.sh")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    return built.stdout.strip().splitlines()[-1]


def _check(binary: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, *map(str, paths)], capture_output=True, text=True, timeout=60)


def test_the_dashboard_matches_grafanas_dashboard_schema(dashboard_check: str) -> None:
    result = _check(dashboard_check, DASHBOARD, DASHBOARD_COPY)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_names_what_is_wrong(dashboard_check: str, tmp_path: Path) -> None:
    board = json.loads(DASHBOARD.read_text())
    board["refreshEvery"] = "30s"  # not a dashboard field
    board["panels"][0]["gridPos"]["w"] = "wide"  # not an integer
    del board["panels"][1]["options"]["reduceOptions"]  # required by the stat panel
    board["panels"][3]["targets"][0]["legend"] = "{{tuningjob}}"  # a Prometheus query's?
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(board))
    result = _check(dashboard_check, path)
    assert result.returncode == 1
    errors = result.stdout.splitlines()
    assert any("unexpected field 'refreshEvery'" in e for e in errors), errors
    assert any("panels[0].gridPos.w" in e for e in errors), errors
    assert any("panels[1].options.reduceOptions" in e for e in errors), errors
    assert any("panels[3].targets[0]" in e and "legend" in e for e in errors), errors
