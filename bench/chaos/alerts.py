"""The soak's alerts: Debian's prometheus scrapes every operator replica under the scrape
job the shipped rules expect (`tuneop-metrics`, its own labels kept), found through a
targets file the soak rewrites whenever a replica is started or killed, and evaluates
the rules file as shipped (manifests/prometheus/tuneop-rules.yaml, with its real `for`
durations). Every alert seen firing is recorded (`Alerts.poll`); at the end each is
judged against what the sampler saw of its job (`check`):

- TuneopOperatorDown, TuneopReconcileFailing, TuneopCheckpointTooOld: never. A fault
  lasts seconds, the standby leads within about 15 s of a kill, and these wait 5 to 10
  minutes.
- TuneopJobFailed only for a job that Failed; TuneopFailureBudgetLow only for one with
  failures (no soak fault is a trainer failure).
- TuneopJobStalled and TuneopTrialStalled only for a job seen with Stalled=True.
- TuneopPreemptionStorm only for a job with more than STORM_THRESHOLD preemptions, and
  it must fire for a job that held more than that within an hour for STORM_SECONDS (a
  scrape and an evaluation) before it ended. The soak's fault rates seldom make one.

An alert the soak does not know is a violation too: judge it, then teach `allowed`."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

from bench.chaos.ledger import Violation
from tests.prometheus_server import Prometheus

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "manifests" / "prometheus" / "tuneop-rules.yaml"
SCRAPE_JOB = "tuneop-metrics"
INTERVAL = "5s"
POLL_SECONDS = 10.0
STORM_THRESHOLD = 5
"""The chart's default preemptionStorm.threshold (the rules file's)."""
STORM_WINDOW = 3600.0
"""The rule's window (preemptionStorm.window, 1h)."""
STORM_SECONDS = 30.0
NEVER = ("TuneopOperatorDown", "TuneopReconcileFailing", "TuneopCheckpointTooOld")


@dataclasses.dataclass
class JobFacts:
    """What the sampler saw of the jobs of one namespace (a job re-created under its
    name shares it), in soak seconds."""

    stalled: bool = False
    failed: bool = False
    failures: int = 0
    preemptions: int = 0
    storm_since: float | None = None
    """When it first had more than STORM_THRESHOLD preemptions within STORM_WINDOW."""
    last_seen: float = 0.0
    counts: list[tuple[float, int]] = dataclasses.field(default_factory=list)
    """(when, preemptions) at each change: the count within the window."""

    def observe(self, status: Obj, now: float) -> None:
        conditions = status.get("conditions") or []
        self.stalled |= any(
            c.get("type") == "Stalled" and c.get("status") == "True" for c in conditions
        )
        self.failed |= status.get("phase") == "Failed"
        self.failures = max(self.failures, int(status.get("failures") or 0))
        preemptions = int(status.get("preemptions") or 0)
        if not self.counts or preemptions != self.counts[-1][1]:
            self.counts.append((now, preemptions))
        self.preemptions = max(self.preemptions, preemptions)
        before = [c for t, c in self.counts if t <= now - STORM_WINDOW]
        if preemptions - (before[-1] if before else 0) > STORM_THRESHOLD:
            self.storm_since = self.storm_since if self.storm_since is not None else now
        self.last_seen = now


def allowed(alert: str, facts: JobFacts | None) -> bool:
    """Whether `alert` may fire for a job of which the sampler saw `facts`."""
    if alert in NEVER or facts is None:
        return False
    return {
        "TuneopJobFailed": facts.failed,
        "TuneopFailureBudgetLow": facts.failures > 0,
        "TuneopJobStalled": facts.stalled,
        "TuneopTrialStalled": facts.stalled,
        "TuneopPreemptionStorm": facts.preemptions > STORM_THRESHOLD,
    }.get(alert, False)


def check(fired: dict[tuple[str, str], float], facts: dict[str, JobFacts],
          namespaces: set[str]) -> list[Violation]:  # fmt: skip
    """The violations of the alerts seen firing (`fired`: (alert, namespace) → when
    first seen; namespace "" for an operator-wide alert) and of the storms that should
    have fired. Alerts of namespaces not the soak's (`namespaces`) are not judged."""
    out = []
    for (alert, namespace), when in sorted(fired.items()):
        if namespace and namespace not in namespaces:
            continue
        if not allowed(alert, facts.get(namespace)):
            out.append(Violation("alerts", namespace, "", f"{alert} fired at {when:.0f} s"))
    for namespace, seen in sorted(facts.items()):
        held = seen.last_seen - seen.storm_since if seen.storm_since is not None else 0.0
        if held >= STORM_SECONDS and ("TuneopPreemptionStorm", namespace) not in fired:
            detail = (f"TuneopPreemptionStorm never fired: {seen.preemptions} preemptions, "
                      f"more than {STORM_THRESHOLD} for {held:.0f} s")  # fmt: skip
            out.append(Violation("alerts", namespace, "", detail))
    return out


class Alerts:
    """A prometheus under `workdir` scraping the replicas' metrics ports (`targets`)."""

    def __init__(self, workdir: Path, interval: str = INTERVAL) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.targets_file = workdir / "targets.json"
        self.targets([])
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(RULES)],
            "scrape_configs": [{
                "job_name": SCRAPE_JOB,
                "honor_labels": True,
                "file_sd_configs": [{"files": [str(self.targets_file)],
                                     "refresh_interval": interval}],
            }],
        }  # fmt: skip
        self.prometheus = Prometheus(config, workdir)
        self.fired: dict[tuple[str, str], float] = {}
        self.facts: dict[str, JobFacts] = {}
        self.polled = float("-inf")

    def targets(self, ports: list[int]) -> None:
        """The replicas' metrics ports now (written whole, then renamed in)."""
        text = json.dumps([{"targets": [f"127.0.0.1:{p}" for p in sorted(ports)]}])
        scratch = self.targets_file.with_suffix(".tmp")
        scratch.write_text(text)
        os.replace(scratch, self.targets_file)

    def observe(self, namespace: str, status: Obj, now: float) -> None:
        self.facts.setdefault(namespace, JobFacts()).observe(status, now)

    def poll(self, now: float, force: bool = False) -> None:
        """Every POLL_SECONDS (or now, `force`): the alerts firing now, each kept with
        when it was first seen."""
        if now - self.polled < POLL_SECONDS and not force:
            return
        self.polled = now
        with contextlib.suppress(OSError, AssertionError, ValueError):
            for alert in self.prometheus.alerts():
                if alert.get("state") == "firing":
                    labels = alert.get("labels") or {}
                    key = (str(labels.get("alertname")), str(labels.get("namespace", "")))
                    self.fired.setdefault(key, now)

    def scrapes(self) -> int:
        """How many scrapes of a replica succeeded (0: the alerts judged nothing)."""
        query = urllib.parse.quote(f'sum(sum_over_time(up{{job="{SCRAPE_JOB}"}}[1d]))')
        with contextlib.suppress(OSError, AssertionError, ValueError, IndexError, KeyError):
            return int(float(self.prometheus.get(f"query?query={query}")["result"][0]["value"][1]))
        return 0

    def stop(self) -> None:
        self.prometheus.stop()
