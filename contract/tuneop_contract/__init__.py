"""The contract between the tuneop operator and the tuneop trainer.

Everything both sides must agree on lives here and only here: environment variable
names, file names on the checkpoint volume, exit codes, the progress record and the final summary.
Standard library only: the operator image has no TensorFlow and the trainer image has
no kopf, but both install this one module. Tested from both sides (tests/unit for the
format itself, tests/trainer for what the trainer writes, tests/e2e for what the
operator reads).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

CONTRACT_VERSION = 1

# --- the TuningJob API: what the operator serves and the `tuneop` client submits ---
API_GROUP = "tuneop.io"
CRD_VERSION = "v1alpha1"
API_VERSION = f"{API_GROUP}/{CRD_VERSION}"
"""A TuningJob's apiVersion."""
KIND = "TuningJob"
PLURAL = "tuningjobs"
LABEL_JOB = "tuneop.io/tuningjob"
"""On every object the operator makes for a TuningJob (its pods among them): the job's name."""
TRAINER_CONTAINER = "trainer"
"""The trainer container's name in every trainer pod (spec.template extends it by name)."""

# --- environment variables set on trainer containers by the operator ---------------
ENV_LOGICAL_CPU_DEVICES = "TUNEOP_LOGICAL_CPU_DEVICES"
"""No GPU and N>1 here: MirroredStrategy over N logical CPU devices."""
ENV_CHECKPOINT_DIR = "TUNEOP_CHECKPOINT_DIR"
"""The checkpoint directory (the PersistentVolume mount); default of `run --dir`."""
ENV_SPEC_FILE = "TUNEOP_SPEC_FILE"
"""The TuningJob spec the trainer reads (mounted from a ConfigMap); default of `--spec`."""
ENV_METRICS_PORT = "TUNEOP_METRICS_PORT"
"""Port of the trainer's Prometheus endpoint; 0 disables it."""
ENV_METRICS_ADDRESS = "TUNEOP_METRICS_ADDRESS"
"""Address the endpoint binds (the pod IP in the local cluster, where pods share a host)."""
ENV_JOB_NAME = "TUNEOP_JOB_NAME"
ENV_JOB_NAMESPACE = "TUNEOP_JOB_NAMESPACE"
"""Name/namespace of the owning TuningJob."""
ENV_JOB_UID = "TUNEOP_JOB_UID"
"""metadata.uid of the owning TuningJob. The trainer records it on the checkpoint volume
(OWNER_FILE) and refuses a volume recorded for another uid (a deleted job of the same
name, another job's claim) unless `spec.checkpoint.adopt` is true. Unset: no check."""
ENV_PROGRESS_CONFIGMAP = "TUNEOP_PROGRESS_CONFIGMAP"
"""The ConfigMap (in TUNEOP_JOB_NAMESPACE) the trainer reports its progress record to;
the operator copies it into the TuningJob's `status.progress` (see docs/design/operator.md,
"Progress"). Unset: no report."""
ENV_PROGRESS_INTERVAL = "TUNEOP_PROGRESS_INTERVAL_SECONDS"
"""At most one progress ConfigMap write per this many seconds, besides the milestones
(a phase, trial or restore change; the first step of a process), which are sent at
once. Unset: DEFAULT_PROGRESS_INTERVAL_SECONDS."""
DEFAULT_PROGRESS_INTERVAL_SECONDS = 60.0
ENV_POD_NAME = "TUNEOP_POD_NAME"
ENV_WORKER_INDEX = "TUNEOP_WORKER_INDEX"
ENV_TF_CONFIG = "TF_CONFIG"
ENV_SCRIPT_WORKDIR = "TUNEOP_SCRIPT_WORKDIR"
"""Script mode: the directory the script runs in, on the checkpoint volume, so what it
writes to relative paths (a saved model, a CSV log) outlives preemptions and the pod.
The operator sets it to DEFAULT_CHECKPOINT_DIR/OUTPUTS_DIR unless the job's pod template
gives the trainer container a workingDir. The writing process of the search runs there;
another trial group in `<dir>/<tuner id>`; a non-chief worker in a scratch directory of
its pod (its copies are lost with it, as Keras's multi-worker guide has them). Unset:
the script runs where it was started."""
ENV_FAILED_TRIALS = "TUNEOP_FAILED_TRIALS"
"""Trials an earlier pod group could not finish and that must not be retried, as
`<trialId>:<reason>` entries separated by commas (`format_failed_trials`). The trainer
marks each one the oracle still has RUNNING (or queued for retry) FAILED before the
search goes on; ids it does not know are ignored."""
FAILED_REASON_OOM = "OOMKilled"
"""Reason in TUNEOP_FAILED_TRIALS of a trial whose trainer ran out of memory."""
ENV_MTBF_SECONDS = "TUNEOP_MTBF_SECONDS"
"""The job's mean time between disruptions as the operator estimates it when it builds
the pod (`mtbf_estimate`), in seconds; with `spec.checkpoint.intervalSeconds: auto` the
trainer checkpoints at the interval that wastes least for it. Unset: MTBF_PRIOR_SECONDS."""

# --- checkpoint cadence ------------------------------------------------------------
CHECKPOINT_INTERVAL_AUTO = "auto"
"""`spec.checkpoint.intervalSeconds: auto`: the trainer chooses the interval (Young/Daly
from its measured save cost and the job's MTBF; docs/design/trainer.md, "Checkpoint cadence")."""
MTBF_PRIOR_SECONDS = 4 * 3600.0
"""The MTBF assumed before a job has seen a disruption: about a spot/preemptible VM's
typical mean time to reclaim. It counts as one observed interval in `mtbf_estimate`."""


def mtbf_estimate(running_seconds: float, disruptions: int) -> float:
    """Mean time between disruptions of a job that has run `running_seconds` (pod-group
    time) and been disrupted `disruptions` times: (prior + running) / (1 + disruptions),
    the prior standing for one interval seen before the job started. With no disruption
    it grows with the running time; each disruption pulls it toward the observed rate."""
    return (MTBF_PRIOR_SECONDS + max(0.0, running_seconds)) / (1 + max(0, disruptions))


def expected_waste_per_hour(interval: float, cost: float, mtbf: float) -> float:
    """Seconds per hour lost to checkpointing every `interval` seconds at `cost` seconds
    a save, with disruptions every `mtbf` seconds on average: the saves (3600 C/T) plus
    the work redone after a disruption, half an interval on average (3600 T/(2M))."""
    return 3600.0 * (cost / interval + interval / (2.0 * mtbf))


# --- parallel trials: keras-tuner's own distributed tuning ---------------------------
# With `spec.parallelTrials > 1` one oracle pod serves keras-tuner's oracle over gRPC and
# each trial group (one pod, or a MultiWorkerMirrored group of pods) runs trials as a
# keras-tuner worker. The variable names are keras-tuner's (keras_tuner/src/distribute),
# so a user's script sees the standard setup.
ENV_TUNER_ID = "KERASTUNER_TUNER_ID"
"""`ORACLE_TUNER_ID` on the oracle pod, `trial_group_tuner_id(g)` on every pod of trial
group g (the workers of one MultiWorkerMirrored group share it). keras-tuner hands a
returning tuner id its ongoing trial, which is how a recreated group resumes its own."""
ENV_ORACLE_IP = "KERASTUNER_ORACLE_IP"
"""Host name of the oracle (its pod's DNS name behind the job's headless Service)."""
ENV_ORACLE_PORT = "KERASTUNER_ORACLE_PORT"
ENV_TRIAL_GROUPS = "TUNEOP_TRIAL_GROUPS"
"""Number of trial groups of the job (`spec.parallelTrials`), on every pod of it."""
ORACLE_TUNER_ID = "chief"
"""keras-tuner treats any tuner id containing "chief" as the oracle's."""
DEFAULT_ORACLE_PORT = 8000


def trial_group_tuner_id(group: int) -> str:
    """Tuner id of trial group `group`; group 0 has keras-tuner's default id, so its
    files are those of a sequential search."""
    return f"tuner{group}"


RESERVED_ENV_PREFIXES = ("TUNEOP_", "KERASTUNER_")
"""The variables above that the operator sets on trainer containers: a job's `spec.env`
may not name them, nor an `envFrom` prefix of its pod template start with one."""
RESERVED_ENV_NAMES = (ENV_TF_CONFIG,)


def reserved_env(name: str) -> bool:
    """Whether the operator sets the variable `name` on trainer containers."""
    return name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES)


DEFAULT_METRICS_PORT = 9464
PROGRESS_POD_HEADER = "X-Tuneop-Pod"
"""Response header of the trainer's `/progress`: its pod's name (TUNEOP_POD_NAME). Pods
sharing a host's network share its ports, so whoever reads `podIP:port` checks it."""
DEFAULT_CHECKPOINT_DIR = "/checkpoints"
DEFAULT_SPEC_FILE = "/etc/tuneop/spec.yaml"
# Script mode: the ConfigMap named by `spec.script.configMap` is mounted read-only here
# (a directory of its own: the spec's directory is a read-only volume too).
SCRIPT_DIR = "/etc/tuneop-script"
# The entry script when `spec.script.configMap.key` is unset and the map has several keys.
DEFAULT_SCRIPT_KEY = "search.py"
TERMINATION_MESSAGE_PATH = "/dev/termination-log"

# --- files in the checkpoint directory ---------------------------------------------
PROGRESS_FILE = "progress.json"
RESULTS_FILE = "results.json"
BEST_MODEL_FILE = "best_model.keras"
TUNER_DIR = "tuner"
TRIALS_DIR = "trials"
OUTPUTS_DIR = "outputs"
"""Script mode: the script's working directory on the volume (ENV_SCRIPT_WORKDIR)."""
PACKAGES_DIR = "packages"
"""Script mode: what `spec.script.requirements` adds to the image, one directory per
requirements file and image (`<key>/`), shared by every pod of the job."""
TENSORBOARD_DIR = "tensorboard"
"""TensorBoard logs: script mode's callbacks under their log_dir, spec mode's runs
<trial>/execution<n> (`spec.tuner.tensorboard`); hack/tensorboard.sh serves it."""
OWNER_FILE = "owner.json"
"""Which TuningJob the search on this volume belongs to: {"uid", "namespace", "name",
"specFingerprint", "adoptedFrom"}; written atomically by the trainer (see ENV_JOB_UID)."""

# --- exit codes ---------------------------------------------------------------------
EXIT_COMPLETED = 0
EXIT_FAILED = 1
"""The search failed: trainer error or the user's code raised."""
EXIT_INVALID_SPEC = 2
"""The spec is wrong; the one-line message names the field. Retrying will not help."""
EXIT_PREEMPTED = 75
"""Stopped by SIGTERM after writing a checkpoint: preempted, resume me (EX_TEMPFAIL)."""

VOLUME_ERROR_PREFIX = "checkpoint volume error:"
"""How the termination message of a trainer that exited 75 because the checkpoint volume
refused a write (full, over quota, read-only, an I/O error) begins: the operator tells
it from a preemption and retries after a backoff, naming the message."""


def is_volume_error(message: str) -> bool:
    """Whether a trainer's termination message says the checkpoint volume failed."""
    return message.strip().startswith(VOLUME_ERROR_PREFIX)


EXIT_CODE_MEANING = {
    EXIT_COMPLETED: "completed",
    EXIT_FAILED: "failed",
    EXIT_INVALID_SPEC: "invalid spec",
    EXIT_PREEMPTED: "preempted",
}


def format_failed_trials(failed: dict[str, str]) -> str:
    """TUNEOP_FAILED_TRIALS' value for {trial id: reason}, in the order given."""
    return ",".join(f"{trial}:{reason}" for trial, reason in failed.items())


def parse_failed_trials(text: str | None) -> dict[str, str]:
    """{trial id: reason} from TUNEOP_FAILED_TRIALS; empty entries are skipped, an entry
    without a reason gets "failed", the first reason of a repeated id wins."""
    out: dict[str, str] = {}
    for entry in (text or "").split(","):
        trial, _, reason = entry.strip().partition(":")
        trial = trial.strip()
        if trial and trial not in out:
            out[trial] = reason.strip() or "failed"
    return out


# --- progress record ----------------------------------------------------------------
PHASE_STARTING = "Starting"
PHASE_RUNNING = "Running"
PHASE_PREEMPTED = "Preempted"
PHASE_COMPLETED = "Completed"
PHASE_FAILED = "Failed"
PHASES = (PHASE_STARTING, PHASE_RUNNING, PHASE_PREEMPTED, PHASE_COMPLETED, PHASE_FAILED)


def now_rfc3339() -> str:
    """UTC time in the RFC 3339 form Kubernetes uses (second precision, `Z`)."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass
class Progress:
    """The trainer's heartbeat: written to `progress.json`, served on the metrics port
    at `/progress`, and (camelCased by `to_status`) patched into the job's progress
    ConfigMap, which the operator checks and copies into the TuningJob's
    `status.progress`. Times are RFC 3339 strings; None means "not yet"."""

    phase: str = PHASE_STARTING
    trial_id: str | None = None
    trials_completed: int = 0
    trials_total: int | None = None
    execution: int = 0
    epoch: int = 0
    step: int = 0
    resumed_from_step: int | None = None
    """Set when this process restored a trial from a checkpoint: the step (within the
    epoch) it resumed at; 0 at an epoch boundary."""
    resumed_from_epoch: int | None = None
    """With resumed_from_step: the epoch it resumed in. (epoch, step) > (0, 0) means the
    trial continued where it stopped instead of starting over."""
    restores: int = 0
    """How many times this search was restored from the volume (all processes)."""
    checkpoint_bytes: int | None = None
    """Bytes under the checkpoint directory (all trials), after the last checkpoint."""
    volume_free_bytes: int | None = None
    """Bytes free on the checkpoint volume, after the last checkpoint."""
    checkpoint_cost_seconds: float | None = None
    """What one checkpoint costs training, as measured (moving average of this process's
    saves: training-thread time blocked plus the background writer's CPU time)."""
    checkpoint_interval_seconds: float | None = None
    """With intervalSeconds auto, once a save is measured: the periodic checkpoint
    interval chosen."""
    mtbf_seconds: float | None = None
    """With intervalSeconds auto: the mean time between disruptions it was chosen for."""
    expected_waste_seconds_per_hour: float | None = None
    """With checkpoint_interval_seconds: `expected_waste_per_hour` of it at the measured cost."""
    last_progress_time: str | None = None
    last_checkpoint_time: str | None = None
    best_trial_id: str | None = None
    best_score: float | None = None
    best_hyperparameters: dict[str, Any] | None = None
    objective: str | None = None
    direction: str | None = None
    top_trials: list[dict[str, Any]] | None = None
    """The best `TOP_TRIALS` completed trials so far, best first (`rank_trials`)."""
    message: str = ""
    version: int = CONTRACT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def to_status(self) -> dict[str, Any]:
        """The camelCase form stored in TuningJob `status.progress` (and, as JSON, in
        the progress ConfigMap)."""
        return {_camel(k): v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Progress:
        """Accepts both the snake_case file form and the camelCase status form;
        unknown keys are ignored so a newer trainer does not break an older operator."""
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            snake = _snake(key)
            if snake in names:
                values[snake] = value
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> Progress:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("progress record must be a JSON object")
        return cls.from_dict(data)


PROGRESS_KEY = "progress.json"
"""Key of the progress ConfigMap holding the record: `to_status()` as JSON."""


def progress_key(tuner_id: str | None = None) -> str:
    """The ConfigMap key (and file name in the checkpoint directory) of one reporter's
    record: `PROGRESS_KEY` for a sequential search; with parallel trials each tuner id
    (the oracle's and each trial group's) has its own, so there is one writer per key."""
    return PROGRESS_KEY if not tuner_id else f"progress.{tuner_id}.json"


def progress_configmap_patch(progress: Progress, tuner_id: str | None = None) -> dict[str, Any]:
    """The JSON merge patch the trainer sends to its progress ConfigMap."""
    key = progress_key(tuner_id)
    return {"data": {key: json.dumps(progress.to_status(), sort_keys=True)}}


def progress_from_configmap(configmap: dict[str, Any] | None, tuner_id: str | None = None) -> Any:
    """The record a progress ConfigMap holds for `tuner_id` (None: the sequential one),
    as decoded JSON of any type (the reader checks each field), or None when there is
    none yet. ValueError: not JSON."""
    data = (configmap or {}).get("data")
    text = data.get(progress_key(tuner_id)) if isinstance(data, dict) else None
    if not isinstance(text, str) or not text:
        return None
    return json.loads(text)


TOP_TRIALS = 5
"""How many of the best trials the progress record and the final summary carry; the
operator keeps them as the TuningJob's `status.topTrials`."""


def rank_trials(
    trials: Any, direction: str | None, limit: int = TOP_TRIALS
) -> list[dict[str, Any]]:
    """The best `limit` of `trials` (dicts with trialId, score, hyperparameters and
    optionally status, as in results.json), best first: only completed trials with a
    finite score; ties keep the given order. Each as {trialId, score, hyperparameters}."""
    scored = [
        t
        for t in trials
        if isinstance(t.get("score"), (int, float))
        and not isinstance(t.get("score"), bool)
        and math.isfinite(t["score"])
        and t.get("status", "COMPLETED") == "COMPLETED"
    ]
    sign = -1.0 if direction == "max" else 1.0
    ranked = sorted(scored, key=lambda t: sign * float(t["score"]))[:limit]
    return [
        {
            "trialId": str(t.get("trialId")),
            "score": float(t["score"]),
            "hyperparameters": dict(t.get("hyperparameters") or {}),
        }
        for t in ranked
    ]


# --- final summary: the termination message of a completed trainer -----------------
TERMINATION_MESSAGE_LIMIT = 4096
"""The kubelet keeps at most this many bytes of a container's termination message."""
FINAL_SUMMARY_MAX_BYTES = 3072
"""A summary longer than this drops its hyperparameters (the rest always fits)."""
FINAL_SUMMARY_KEY = "tuneopFinal"
"""Marks a termination message as a final summary (its value: the contract version);
error messages, the other thing the trainer writes there, are plain text."""


@dataclasses.dataclass(frozen=True)
class FinalSummary:
    """What a trainer that exited 0 leaves in its termination message: the search's
    final counts and best trial, so the operator's final status does not depend on the
    trainer's last status patch having reached the API server."""

    trials_completed: int
    trials_total: int | None = None
    best_trial_id: str | None = None
    best_score: float | None = None
    best_hyperparameters: dict[str, Any] | None = None
    top_trials: list[dict[str, Any]] | None = None

    def to_message(self) -> str:
        """Compact JSON, at most FINAL_SUMMARY_MAX_BYTES: if it would not fit, the top
        trials go first (`topTrialsOmitted`; the progress record still has them), then
        the best trial's hyperparameters (`hyperparametersOmitted`)."""
        record: dict[str, Any] = {FINAL_SUMMARY_KEY: CONTRACT_VERSION}
        record.update((_camel(k), v) for k, v in dataclasses.asdict(self).items())
        text = json.dumps(record, separators=(",", ":"), sort_keys=True, default=str)
        if len(text.encode()) <= FINAL_SUMMARY_MAX_BYTES:
            return text
        if record["topTrials"] is not None:
            record["topTrials"] = None
            record["topTrialsOmitted"] = True
            text = json.dumps(record, separators=(",", ":"), sort_keys=True, default=str)
            if len(text.encode()) <= FINAL_SUMMARY_MAX_BYTES:
                return text
        record["bestHyperparameters"] = None
        record["hyperparametersOmitted"] = True
        return json.dumps(record, separators=(",", ":"), sort_keys=True, default=str)


def parse_final_summary(text: str | None) -> FinalSummary | None:
    """The summary in a termination message, or None (absent, plain text, not ours,
    malformed). A field of the wrong type reads as unknown (None), never raises."""
    if not text or FINAL_SUMMARY_KEY not in text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or FINAL_SUMMARY_KEY not in data:
        return None
    done = _count(data.get("trialsCompleted"))
    if done is None:
        return None
    best_id = data.get("bestTrialId")
    score = data.get("bestScore")
    hps = data.get("bestHyperparameters")
    top = data.get("topTrials")
    return FinalSummary(
        trials_completed=done,
        trials_total=_count(data.get("trialsTotal")),
        best_trial_id=str(best_id) if isinstance(best_id, (str, int)) and best_id != "" else None,
        best_score=float(score)
        if isinstance(score, (int, float)) and not isinstance(score, bool)
        else None,
        best_hyperparameters=hps if isinstance(hps, dict) else None,
        top_trials=top if isinstance(top, list) and all(isinstance(t, dict) for t in top) else None,
    )


def write_termination_message(text: str, path: str = TERMINATION_MESSAGE_PATH) -> bool:
    """Write `text` where the kubelet reads it; only when the file exists (the kubelet
    creates it in a pod; outside one there is nothing to write). False if not written."""
    if not os.path.exists(path):
        return False
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError:
        return False
    return True


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def read_progress(checkpoint_dir: str | os.PathLike[str]) -> Progress | None:
    """The progress record in a checkpoint directory, or None if there is none yet."""
    path = Path(checkpoint_dir) / PROGRESS_FILE
    try:
        return Progress.from_json(path.read_text())
    except FileNotFoundError:
        return None


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` so that a kill at any instant leaves either the old or the new file:
    temp file in the same directory, fsync, rename, fsync the directory."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_progress(checkpoint_dir: str | os.PathLike[str], progress: Progress) -> None:
    write_atomic(Path(checkpoint_dir) / PROGRESS_FILE, progress.to_json().encode())


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _snake(name: str) -> str:
    out = []
    for ch in name:
        if ch.isupper():
            out.append("_" + ch.lower())
        else:
            out.append(ch)
    return "".join(out)
