"""tuneop's Prometheus alerts, checked with the real promtool (Debian's prometheus package,
installed by hack/prometheus.sh when missing).

The rules live in charts/tuneop/templates/_alerts.tpl; hack/render-manifests.sh writes
them as a PrometheusRule and as the plain rules file manifests/prometheus/tuneop-rules.yaml
(drift between chart and files is tested in test_chart.py). The promtool unit tests in
tests/unit/prometheus/ prove, among others, that TuneopTrialStalled fires when a running
job's progress stops for longer than its stall timeout and not while progress advances.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.localcluster.controlplane import free_port
from tests.prometheus_server import Prometheus
from tests.unit.dashboard_queries import exprs as dashboard_exprs
from tests.unit.dashboard_queries import filled as dashboard_filled
from tests.unit.metric_names import AGREED, LOOP, OPERATOR

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "manifests" / "prometheus" / "tuneop-rules.yaml"
PROMETHEUS_RULE = ROOT / "manifests" / "prometheus" / "prometheusrule.yaml"
PROMTOOL_TESTS = ROOT / "tests" / "unit" / "prometheus" / "tuneop-rules.test.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"

ALERTS = {
    "TuneopTrialStalled",
    "TuneopJobStalled",
    "TuneopCheckpointTooOld",
    "TuneopFailureBudgetLow",
    "TuneopJobFailed",
    "TuneopPreemptionStorm",
    "TuneopReconcileFailing",
    "TuneopOperatorDown",
}
# The operator's metric names agreed for the alerts: per job (labels namespace, tuningjob
# only) and operator-wide (no labels).
OPERATOR_METRICS = AGREED | LOOP | OPERATOR
PHASES = {"Pending", "Running", "Suspended", "Succeeded", "Failed"}


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES_FILE.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_promtool_accepts_the_rules_file(promtool: str) -> None:
    result = run([promtool, "check", "rules", str(RULES_FILE)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout


def test_promtool_unit_tests_pass(promtool: str) -> None:
    """Each alert fires on its condition, only after its `for`, and not for the healthy
    neighbour in the same test: stalled after progress stops (and clears when it resumes),
    never for a job that advances, finished, or has not reported yet; job stalled on the
    operator's condition; checkpoint too old while progress continues (not for a hung
    trainer); failure budget at 80 % (not for a failed job or maxFailures 0); failed for
    an hour after completionTime; preemption storm, also split between two replicas'
    series by a take-over (not at exactly the threshold); operator down when no replica is up,
    none is the leader, or every pass of the leader fails."""
    result = run([promtool, "test", "rules", str(PROMTOOL_TESTS)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_catch_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    """The unit tests are not vacuous: a stall rule that ignores the stall timeout (fires
    as soon as the timestamp is older than 0 s) makes them fail."""
    broken = RULES_FILE.read_text().replace(
        "> max by (namespace, tuningjob) (tuneop_tuningjob_stall_timeout_seconds)",
        "> 0 * max by (namespace, tuningjob) (tuneop_tuningjob_stall_timeout_seconds)",
    )
    assert broken != RULES_FILE.read_text()
    rules_copy = tmp_path / "manifests" / "prometheus" / "tuneop-rules.yaml"
    rules_copy.parent.mkdir(parents=True)
    rules_copy.write_text(broken)
    tests_copy = tmp_path / "tests" / "unit" / "prometheus" / PROMTOOL_TESTS.name
    tests_copy.parent.mkdir(parents=True)
    tests_copy.write_text(PROMTOOL_TESTS.read_text())
    result = run([promtool, "test", "rules", str(tests_copy)])
    assert result.returncode != 0
    assert "TuneopTrialStalled" in result.stdout + result.stderr


def test_rules_file_is_the_prometheusrule_spec() -> None:
    rule = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == yaml.safe_load(RULES_FILE.read_text())


def test_the_agreed_alerts_exist_with_severity_and_runbook() -> None:
    by_name = {rule["alert"]: rule for rule in rules()}
    assert set(by_name) == ALERTS
    for name, rule in by_name.items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), name
        assert rule["annotations"]["runbook_url"].endswith("docs/runbooks.md#" + name.lower())


def test_alerts_use_only_the_agreed_metrics_and_labels() -> None:
    for rule in rules():
        expr = rule["expr"]
        names = set(re.findall(r"\btuneop_[a-z_]+", expr))
        assert names <= OPERATOR_METRICS, (rule["alert"], names - OPERATOR_METRICS)
        for grouping in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            labels = {label.strip() for label in grouping.split(",")}
            # the stalled gauge's reason label is kept so the alert names it
            keep = {"reason"} if "tuneop_tuningjob_stalled)" in expr else set()
            assert labels == {"namespace", "tuningjob", *keep}, (rule["alert"], labels)
        for phase in re.findall(r'phase="([^"]*)"', expr):
            assert phase in PHASES, (rule["alert"], phase)


def test_every_alert_has_a_complete_runbook_section() -> None:
    text = RUNBOOKS.read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S))
    assert set(sections) == ALERTS
    for name, body in sections.items():
        for part in ("**Meaning.**", "**Impact.**", "**Diagnosis.**", "**Mitigation.**"):
            assert part in body, (name, part)
        assert "kubectl" in body, name


def _failed_reasons() -> set[str]:
    """The reasons of the Failed condition, as the operator's code finishes a job."""
    code = "\n".join(p.read_text() for p in (ROOT / "operator" / "tuneop").rglob("*.py"))
    finished = re.findall(r'finish\(\s*(?:[^()]|\([^()]*\))*?reason="(\w+)"', code)
    return set(finished) - {"Completed"}


def test_the_job_failed_alert_and_its_runbook_name_every_failure_reason() -> None:
    reasons = _failed_reasons()
    assert {"FailureBudgetExceeded", "InvalidSpec", "Stalled"} <= reasons  # the scan works
    (rule,) = [r for r in rules() if r["alert"] == "TuneopJobFailed"]
    section = RUNBOOKS.read_text().split("## TuneopJobFailed", 1)[1].split("\n## ", 1)[0]
    for reason in sorted(reasons):
        assert reason in rule["annotations"]["description"], reason
        assert f"`{reason}`" in section, reason


# --- a real Prometheus scraping the operator's real metrics collector -------------------
def _rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.slow
def test_real_prometheus_evaluates_the_alerts_on_operator_metrics(
    promtool: str, tmp_path: Path
) -> None:
    """Debian's prometheus on a free loopback port scrapes an exporter built from the
    operator's own metrics collector (tuneop.run.metrics.JobMetrics, fed job spec/status as
    the operator does) under the scrape job name the alerts expect, and evaluates the
    shipped rules file: a Running job whose progress is older than its stall timeout is
    alerting (pending), a Running job with fresh progress is not, a Failed job is, a job
    that Succeeded is not kept Running by a standby replica's old snapshot (the standby,
    a second target, exports only its leader gauge 0), and TuneopOperatorDown is silent
    while the leader is up. With a trainer target (the trainer's own metrics registry)
    beside it, every query of the dashboard runs on that Prometheus and returns series."""
    from prometheus_client import CollectorRegistry, start_http_server
    from tuneop.run.metrics import JobMetrics
    from tuneop_trainer.report.progress import Metrics as TrainerMetrics

    prometheus = Path(promtool).with_name("prometheus")
    now = time.time()
    jobs = JobMetrics()
    jobs.observe(
        "ml",
        "stuck",
        {"stallTimeoutSeconds": 60},
        {
            "phase": "Running",
            "lastProgressTime": _rfc3339(now - 600),
            "lastCheckpointTime": _rfc3339(now - 600),
            "preemptions": 1,
            "trialsCompleted": 2,
            "trialsTotal": 6,
            "bestTrial": {"id": "1", "score": 0.8},
            "goodput": {"percent": 90.0, "allocatedGpuSeconds": 100.0, "lostGpuSeconds": 10.0},
        },
    )
    jobs.recovered("Preempted", 12.0)
    jobs.observe(
        "ml",
        "advancing",
        {"stallTimeoutSeconds": 60},
        {
            "phase": "Running",
            "lastProgressTime": _rfc3339(now),
            # checkpoint.intervalSeconds auto: the trainer's choice, copied into status
            "progress": {"checkpointIntervalSeconds": 85.8, "expectedWasteSecondsPerHour": 16.6},
        },
    )
    jobs.observe(
        "ml", "broken", {}, {"phase": "Failed", "failures": 3, "completionTime": _rfc3339(now)}
    )
    jobs.observe(
        "ml",
        "done",
        {"stallTimeoutSeconds": 60},
        {"phase": "Succeeded", "lastProgressTime": _rfc3339(now - 600)},
    )
    # A standby replica still holds a snapshot of "done" from while it was Running; it
    # exports no job series, so the alerts' `max by` does not keep "done" Running.
    standby = JobMetrics()
    standby.observe(
        "ml",
        "done",
        {"stallTimeoutSeconds": 60},
        {"phase": "Running", "lastProgressTime": _rfc3339(now - 600)},
    )
    standby.set_leader(False)
    servers = []
    targets = []
    for collector in (jobs, standby):
        registry = CollectorRegistry()
        registry.register(collector)
        port = free_port()
        servers.append(start_http_server(port, addr="127.0.0.1", registry=registry))
        targets.append(f"127.0.0.1:{port}")
    # A trainer pod of "stuck", as the PodMonitor labels it (namespace, pod).
    trainer = TrainerMetrics()
    trainer.steps.inc(40)
    trainer.checkpoints.inc(2)
    trainer.checkpoint_seconds.inc(0.5)
    trainer_port = free_port()
    servers.append(start_http_server(trainer_port, addr="127.0.0.1", registry=trainer.registry))

    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES_FILE)],
        "scrape_configs": [
            {
                "job_name": "tuneop-metrics",
                "honor_labels": True,
                "static_configs": [{"targets": targets}],
            },
            {
                "job_name": "tuneop-trainer",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{trainer_port}"],
                        "labels": {"namespace": "ml", "pod": "stuck-worker-0"},
                    }
                ],
            },
        ],
    }
    prom = Prometheus(config, tmp_path, str(prometheus))
    try:
        active: dict[str, set[str]] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(1)
            prom.check_running()
            try:
                groups = prom.answer("rules?type=alert")["data"]["groups"]
            except OSError:
                continue
            active = {
                rule["name"]: {a["labels"].get("tuningjob", "") for a in rule["alerts"]}
                for group in groups
                for rule in group["rules"]
            }
            up = prom.answer("query?query=up%3D%3D1")["data"]["result"]
            if active.get("TuneopTrialStalled") and active.get("TuneopJobFailed") and len(up) == 3:
                break
        assert active.get("TuneopTrialStalled") == {"stuck"}, active
        assert active.get("TuneopJobFailed") == {"broken"}, active
        assert active.get("TuneopOperatorDown") == set(), active
        assert active.get("TuneopPreemptionStorm") == set(), active
        for quiet in ("TuneopJobStalled", "TuneopCheckpointTooOld", "TuneopFailureBudgetLow"):
            assert active.get(quiet) == set(), active
        leaders = prom.answer("query?query=tuneop_operator_leader")["data"]["result"]
        assert sorted(r["value"][1] for r in leaders) == ["0", "1"]
        # The labels survived the scrape (honor_labels) exactly as the alerts group them.
        result = prom.answer("query?query=tuneop_tuningjob_stall_timeout_seconds")["data"]
        assert {(r["metric"]["namespace"], r["metric"]["tuningjob"]) for r in result["result"]} >= {
            ("ml", "stuck"),
            ("ml", "advancing"),
        }
        # Every dashboard query, the variables as Grafana fills them for "All", runs and
        # returns series (rates once the trainer's counters moved between two scrapes).
        trainer.steps.inc(40)
        trainer.checkpoints.inc(1)
        trainer.checkpoint_seconds.inc(0.25)
        empty: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            empty = []
            for title, expr in dashboard_exprs():
                query = urllib.parse.quote(dashboard_filled(expr))
                answer = prom.answer(f"query?query={query}")
                assert answer["status"] == "success", (title, expr, answer)
                if not answer["data"]["result"]:
                    empty.append(f"{title}: {expr}")
            if not empty:
                break
            time.sleep(1)
        assert not empty, empty
    finally:
        prom.stop()
        for server, thread in servers:
            server.shutdown()
            thread.join(timeout=5)
