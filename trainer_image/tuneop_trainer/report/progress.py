"""Progress for the operator and for people.

One `Reporter` owns the `tuneop_contract.Progress` record of this process and publishes
it three ways:
- `progress.json` in the checkpoint directory (atomic; at most every `min_interval`
  seconds plus at every checkpoint, trial end and exit);
- an HTTP endpoint (prometheus-client registry) on TUNEOP_METRICS_ADDRESS:PORT serving
  `/metrics` (Prometheus text format) and `/progress` (the record as JSON);
- when TUNEOP_JOB_NAMESPACE and TUNEOP_PROGRESS_CONFIGMAP are set and the in-cluster
  ServiceAccount is mounted, a JSON merge patch of the job's progress ConfigMap (the
  record under `tuneop_contract.progress_key(tuner id)`; the operator copies it into the
  TuningJob's `status.progress`), sent from a background thread: at once for a milestone
  (a phase, trial, execution, restore or best-trial change, the first training step of
  the process) and at exit, otherwise coalesced to at most one per
  TUNEOP_PROGRESS_INTERVAL_SECONDS (the operator sets it; live detail is on `/progress`).
  Every write is an etcd write and a status patch by the operator: a steady job's cost to
  the API server is these. API errors are logged, never raised. The pod's token may
  patch that one ConfigMap and nothing else: it cannot touch the TuningJob.

With parallel trials each reporter (the oracle, each trial group) has its own tuner id,
so its own file (`progress.<tuner id>.json`) and its own ConfigMap key: one writer each.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import ssl
import threading
import time
import urllib.request
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from tuneop_contract import (
    DEFAULT_METRICS_PORT,
    DEFAULT_PROGRESS_INTERVAL_SECONDS,
    ENV_JOB_NAMESPACE,
    ENV_METRICS_ADDRESS,
    ENV_METRICS_PORT,
    ENV_POD_NAME,
    ENV_PROGRESS_CONFIGMAP,
    ENV_PROGRESS_INTERVAL,
    PROGRESS_POD_HEADER,
    Progress,
    now_rfc3339,
    progress_configmap_patch,
    progress_key,
    write_atomic,
)

from ..checkpoint import SaveDone

log = logging.getLogger(__name__)

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def milestone(progress: Progress) -> tuple[Any, ...]:
    """What the operator acts on as soon as it changes (phase, trial, restore, best
    trial): a record that changes it is sent at once, not coalesced."""
    p = progress
    return (p.phase, p.trial_id, p.trials_completed, p.execution, p.restores,
            p.resumed_from_step, p.resumed_from_epoch, p.best_trial_id, p.message)  # fmt: skip


def patch_interval(env: Mapping[str, str] = os.environ) -> float:
    """TUNEOP_PROGRESS_INTERVAL_SECONDS (a bad value: the default, logged)."""
    raw = env.get(ENV_PROGRESS_INTERVAL)
    if raw is None:
        return DEFAULT_PROGRESS_INTERVAL_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:
        log.warning("%s=%r is not seconds in (0, 86400]; using %s", ENV_PROGRESS_INTERVAL, raw,
                    DEFAULT_PROGRESS_INTERVAL_SECONDS)  # fmt: skip
        return DEFAULT_PROGRESS_INTERVAL_SECONDS
    return value


class Metrics:
    """The Prometheus series (no trial ids or hyperparameters as labels)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.trials_completed = Gauge(
            "tuneop_trainer_trials_completed", "Trials completed", registry=r
        )
        self.trials_total = Gauge(
            "tuneop_trainer_trials_total_planned", "Trials planned", registry=r
        )
        self.epoch = Gauge("tuneop_trainer_epoch", "Epoch of the running trial", registry=r)
        self.step = Gauge("tuneop_trainer_step", "Step within the epoch", registry=r)
        self.steps = Counter(
            "tuneop_trainer_steps", "Training steps run by this process", registry=r
        )
        self.best = Gauge("tuneop_trainer_best_score", "Best objective value so far", registry=r)
        self.checkpoints = Counter(
            "tuneop_trainer_checkpoints", "Checkpoints written by this process", registry=r
        )
        self.checkpoint_seconds = Counter(
            "tuneop_trainer_checkpoint_seconds",
            "Seconds spent writing checkpoints (in the background writer)",
            registry=r,
        )
        self.volume_used = Gauge(
            "tuneop_trainer_checkpoint_volume_used_bytes",
            "Bytes under the checkpoint directory after the last checkpoint",
            registry=r,
        )
        self.volume_free = Gauge(
            "tuneop_trainer_checkpoint_volume_free_bytes",
            "Bytes free on the checkpoint volume after the last checkpoint",
            registry=r,
        )
        self.restores = Counter("tuneop_trainer_restores", "Checkpoint restores", registry=r)
        self.checkpoint_cost = Gauge(
            "tuneop_trainer_checkpoint_cost_seconds",
            "Training time one checkpoint costs (moving average: blocked + writer CPU)",
            registry=r,
        )
        self.checkpoint_interval = Gauge(
            "tuneop_trainer_checkpoint_interval_seconds",
            "Periodic checkpoint interval chosen (intervalSeconds auto)",
            registry=r,
        )
        self.expected_waste = Gauge(
            "tuneop_trainer_checkpoint_expected_waste_seconds_per_hour",
            "Expected seconds lost per hour to saves and redone work at that interval",
            registry=r,
        )
        self.last_progress = Gauge(
            "tuneop_trainer_last_progress_timestamp_seconds", "Time of the last step", registry=r
        )
        self.last_checkpoint = Gauge(
            "tuneop_trainer_last_checkpoint_timestamp_seconds",
            "Time of the last checkpoint",
            registry=r,
        )


CARRIED_ON = (
    "trials_completed", "trials_total", "best_trial_id", "best_score",
    "best_hyperparameters", "objective", "direction", "top_trials", "restores",
)  # fmt: skip
"""What a search has done, which a new process of it carries on from the record the
last one left: its first report must not say 0 trials done until its next trial ends
(status.trialsCompleted, the best trial and the dashboard would move backwards after
every preemption). What the process itself does (phase, trial, step, times) it reports
anew."""


def carried_on(previous: Progress | None) -> dict[str, Any]:
    """The fields of `previous` (the record on the volume) a new process starts from."""
    if previous is None:
        return {}
    return {name: getattr(previous, name) for name in CARRIED_ON}


class Reporter:
    def __init__(
        self,
        checkpoint_dir: Path,
        write: bool = True,
        min_interval: float = 2.0,
        tuner_id: str | None = None,
    ) -> None:
        self.dir = checkpoint_dir
        self.write = write  # only the chief writes the volume
        self.tuner_id = tuner_id  # parallel trials: whose record this is
        self.path = checkpoint_dir / progress_key(tuner_id)
        self.min_interval = min_interval
        self.progress = Progress()
        self.metrics = Metrics()
        self._lock = threading.Lock()
        self._last_write = 0.0
        # The checkpoint writer's thread publishes too: snapshots are numbered and an
        # older one never replaces a newer one.
        self._seq = 0
        self._published = 0
        self._sent_milestone: tuple[Any, ...] | None = None
        self._latest: Progress | None = None  # the newest record published
        self._stepped = False  # this process has reported a training step
        self._publish_lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        # One reporter per job: only the chief reports progress (and writes files).
        self._patcher = _ProgressPatcher.from_env(tuner_id) if write else None

    def previous(self) -> Progress | None:
        """The record an earlier process of this reporter left on the volume."""
        try:
            return Progress.from_json(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return None

    # -- updates ----------------------------------------------------------------
    def update(self, force: bool = False, urgent: bool = False, **fields: Any) -> None:
        """Take `fields`; publish now with `force` (progress.json written; the
        ConfigMap sent at once only at a milestone or with `urgent`), else at most every
        `min_interval`; with `urgent` the ConfigMap gets it at once even when the file
        waits."""
        with self._lock:
            self.progress = dataclasses.replace(self.progress, **fields)
            now = time.monotonic()
            due = force or now - self._last_write >= self.min_interval
            if due:
                self._last_write = now
            if due or urgent:
                self._seq += 1
            snapshot, seq = self.progress, self._seq
        if due or urgent:
            self._publish(snapshot, urgent, seq, write_file=due)

    def step(self, epoch: int, step: int) -> None:
        self.metrics.steps.inc()
        self.metrics.step.set(step)
        self.metrics.epoch.set(epoch)
        self.metrics.last_progress.set(time.time())
        # the first step of this process ends a recovery: the operator times it
        first, self._stepped = not self._stepped, True
        self.update(urgent=first, epoch=epoch, step=step, last_progress_time=now_rfc3339())

    def saved(self, done: SaveDone, cadence: dict[str, Any] | None = None) -> None:
        """BackgroundWriter's `on_saved` (on the writer thread); `cadence`: the
        checkpoint cadence's Progress fields after this save (Cadence.report)."""
        self.checkpointed(done.seconds, done.usage, done.position, cadence)

    def checkpointed(
        self,
        seconds: float,
        usage: tuple[int, int, int] | None = None,
        position: tuple[int, int] | None = None,
        cadence: dict[str, Any] | None = None,
    ) -> None:
        """A checkpoint is durable; `usage`: checkpoint.volume_usage after it. The record
        published now names the position saved (training may be a few steps further;
        the next step's update says so): "durable at (epoch, step)" is what a reader
        deciding what a loss would cost needs."""
        self.metrics.checkpoints.inc()
        self.metrics.checkpoint_seconds.inc(seconds)
        self.metrics.last_checkpoint.set(time.time())
        fields: dict[str, Any] = {"last_checkpoint_time": now_rfc3339()}
        if position is not None:
            fields.update(epoch=position[0], step=position[1])
        if usage is not None:
            used, free, _size = usage
            self.metrics.volume_used.set(used)
            self.metrics.volume_free.set(free)
            fields.update(checkpoint_bytes=used, volume_free_bytes=free)
        self.update(force=True, **fields, **(cadence or {}))

    def _publish(self, snapshot: Progress, urgent: bool, seq: int, write_file: bool = True) -> None:
        with self._publish_lock:
            if seq < self._published:
                # a newer record went first (the writer thread): it carries the urgency
                if urgent and self._patcher is not None and self._latest is not None:
                    self._patcher.submit(self._latest, True)
                return
            self._published, self._latest = seq, snapshot
            if self.write and write_file:
                try:
                    write_atomic(self.path, snapshot.to_json().encode())
                except OSError as exc:
                    log.warning("cannot write %s: %s", self.path.name, exc)
            mark = milestone(snapshot)
            urgent = urgent or mark != self._sent_milestone
            self._sent_milestone = mark
            if self._patcher is not None:
                self._patcher.submit(snapshot, urgent)
        if snapshot.best_score is not None:
            self.metrics.best.set(snapshot.best_score)
        self.metrics.trials_completed.set(snapshot.trials_completed)
        if snapshot.trials_total is not None:
            self.metrics.trials_total.set(snapshot.trials_total)
        for gauge, value in (
            (self.metrics.checkpoint_cost, snapshot.checkpoint_cost_seconds),
            (self.metrics.checkpoint_interval, snapshot.checkpoint_interval_seconds),
            (self.metrics.expected_waste, snapshot.expected_waste_seconds_per_hour),
        ):
            if value is not None:
                gauge.set(value)

    def flush(self, timeout: float = 2.0) -> None:
        """Hand the latest record to the ConfigMap patcher now (bounded wait)."""
        if self._patcher is not None:
            self._patcher.flush(timeout)

    def close(self) -> None:
        if self._patcher is not None:
            self._patcher.flush()
        if self._server is not None:
            self._server.shutdown()

    # -- HTTP endpoint ----------------------------------------------------------
    def serve(self, port: int | None = None, address: str | None = None) -> int | None:
        """Start /metrics and /progress; returns the bound port (None if disabled)."""
        if port is None:
            port = int(os.environ.get(ENV_METRICS_PORT, DEFAULT_METRICS_PORT))
        if port < 0 or (port == 0 and ENV_METRICS_PORT in os.environ):
            return None
        address = address or os.environ.get(ENV_METRICS_ADDRESS) or "0.0.0.0"
        reporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/progress"):
                    body = reporter.progress.to_json().encode()
                    ctype = "application/json"
                elif self.path.startswith("/metrics"):
                    body = generate_latest(reporter.metrics.registry)
                    ctype = CONTENT_TYPE_LATEST
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header(PROGRESS_POD_HEADER, os.environ.get(ENV_POD_NAME, ""))
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:  # keep scrapes out of the log
                pass

        try:
            self._server = ThreadingHTTPServer((address, port), Handler)
        except OSError as exc:
            log.warning("metrics endpoint disabled: cannot bind %s:%s: %s", address, port, exc)
            return None
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        bound = int(self._server.server_address[1])
        log.info("metrics on http://%s:%d/metrics and /progress", address, bound)
        return bound


class _ProgressPatcher:
    """Merge-patches the job's progress ConfigMap from a daemon thread."""

    def __init__(
        self, url: str, token_path: Path, ca_path: Path, tuner_id: str | None = None
    ) -> None:
        self.url = url
        self.tuner_id = tuner_id
        self.token_path = token_path
        self.context = ssl.create_default_context(cafile=str(ca_path))
        self._pending: Progress | None = None
        self._sending = False
        self._cond = threading.Condition()
        self._last = 0.0
        self._force = False
        self.interval = patch_interval()
        threading.Thread(target=self._loop, daemon=True).start()

    @classmethod
    def from_env(cls, tuner_id: str | None = None) -> _ProgressPatcher | None:
        configmap = os.environ.get(ENV_PROGRESS_CONFIGMAP)
        namespace = os.environ.get(ENV_JOB_NAMESPACE)
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        token, ca = SA_DIR / "token", SA_DIR / "ca.crt"
        if not (configmap and namespace and host and token.exists() and ca.exists()):
            return None
        if ":" in host:
            host = f"[{host}]"
        url = f"https://{host}:{port}/api/v1/namespaces/{namespace}/configmaps/{configmap}"
        return cls(url, token, ca, tuner_id)

    def submit(self, progress: Progress, urgent: bool) -> None:
        """The latest record; sent at once if `urgent`, else when the interval since
        the last write has passed (a newer record replaces an unsent one)."""
        with self._cond:
            self._pending = progress
            self._force = self._force or urgent
            self._cond.notify()

    def flush(self, timeout: float = 5.0) -> None:
        """Until the latest record was sent (or `timeout`)."""
        deadline = time.monotonic() + timeout
        while (self._pending is not None or self._sending) and time.monotonic() < deadline:
            with self._cond:
                self._force = True
                self._cond.notify()
            time.sleep(0.05)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None:
                    self._cond.wait()
                wait = self.interval - (time.monotonic() - self._last)
                if wait > 0 and not self._force:
                    self._cond.wait(wait)
                    continue
                progress, self._pending, self._force = self._pending, None, False
                self._sending = True
            self._last = time.monotonic()
            try:
                self._patch(progress)
            finally:
                self._sending = False

    def _patch(self, progress: Progress) -> None:
        body = json.dumps(progress_configmap_patch(progress, self.tuner_id)).encode()
        try:
            request = urllib.request.Request(
                self.url,
                data=body,
                method="PATCH",
                headers={
                    "Content-Type": "application/merge-patch+json",
                    "Authorization": f"Bearer {self.token_path.read_text().strip()}",
                },
            )
            with urllib.request.urlopen(request, timeout=5, context=self.context) as resp:
                resp.read()
        except Exception as exc:  # never crash training over a progress report
            log.warning("progress report failed: %s", exc)
