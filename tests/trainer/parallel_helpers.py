"""Run a parallel search the way its pods do: one oracle process (tuner id "chief") and
trial-group processes (tuner0, tuner1, ...) on 127.0.0.1, one shared checkpoint
directory, keras-tuner's distributed-tuning variables in their environment."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import yaml
from trainer_helpers import env, spec_trial, tiny_spec
from tuneop_contract import (
    ENV_ORACLE_IP,
    ENV_ORACLE_PORT,
    ENV_TF_CONFIG,
    ENV_TRIAL_GROUPS,
    ENV_TUNER_ID,
    ORACLE_TUNER_ID,
    TUNER_DIR,
    Progress,
    progress_key,
    trial_group_tuner_id,
)

from tests.checkpoints import positions
from tests.forkserver import TrainerProcess, launch
from tests.localcluster.controlplane import free_port

ORACLE = ORACLE_TUNER_ID


def parallel_spec(samples: int = 320, **tuner: Any) -> dict[str, Any]:
    """A 6-trial RandomSearch of the tiny CNN; each trial a couple of seconds (32 steps
    per epoch, 2 epochs), checkpoints every 3 steps: room for a kill mid-epoch."""
    manifest = tiny_spec(samples, "par", **{"algorithm": "RandomSearch", "maxTrials": 6, **tuner})
    del manifest["spec"]["tuner"]["factor"]  # Hyperband's
    return manifest


class Search:
    """The processes of one parallel search in `tmp` (checkpoints in tmp/ckpt)."""

    def __init__(
        self,
        tmp: Path,
        groups: int = 2,
        manifest: dict[str, Any] | None = None,
        script: Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.ckpt = tmp / "ckpt"
        self.groups = groups
        self.port = free_port()
        self.script = script
        self.extra_env = dict(extra_env or {})
        self.spec = tmp / "spec.yaml"
        self.spec.write_text(yaml.safe_dump(manifest or parallel_spec()))
        self.procs: dict[str, TrainerProcess] = {}
        self.starts: dict[str, int] = {}

    def tuner_ids(self) -> list[str]:
        return [ORACLE] + [trial_group_tuner_id(g) for g in range(self.groups)]

    def log(self, tuner_id: str) -> Path:
        return self.tmp / f"{tuner_id}.log"

    def start(
        self, tuner_id: str, extra: dict[str, str] | None = None, name: str | None = None
    ) -> TrainerProcess:
        """Start one process of `tuner_id` (`name`: its process and log name when a
        group has several, e.g. "tuner0-w1")."""
        name = name or tuner_id
        e = env(devices=1)
        e.update(
            {
                ENV_TUNER_ID: tuner_id,
                ENV_ORACLE_IP: "127.0.0.1",
                ENV_ORACLE_PORT: str(self.port),
                ENV_TRIAL_GROUPS: str(self.groups),
            }
        )
        e.update(self.extra_env)
        e.update(extra or {})
        cmd = ["-m", "tuneop_trainer"]
        if self.script is None:
            cmd += ["run", "--spec", str(self.spec), "--dir", str(self.ckpt)]
        else:
            cmd += ["exec", "--dir", str(self.ckpt), "--spec", str(self.spec)]
            cmd += ["--deterministic", str(self.script)]
        log = self.log(name)
        with log.open("ab") as handle:
            handle.write(f"--- start {self.starts.get(name, 0)}\n".encode())
        self.starts[name] = self.starts.get(name, 0) + 1
        proc = launch(cmd, e, log, cwd=self.tmp)
        self.procs[name] = proc
        return proc

    def start_all(self, skip: tuple[str, ...] = ()) -> None:
        for tuner_id in self.tuner_ids():
            if tuner_id not in skip:
                self.start(tuner_id)

    def start_multiworker(self, tuner_id: str, workers: int = 2) -> list[str]:
        """A MultiWorkerMirrored trial group: `workers` processes sharing `tuner_id`,
        TF_CONFIG on loopback; returns their names."""
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(workers)]
        names = []
        for index in range(workers):
            config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
            name = f"{tuner_id}-w{index}"
            self.start(tuner_id, {ENV_TF_CONFIG: json.dumps(config)}, name=name)
            names.append(name)
        return names

    def wait(self, timeout: float = 240) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        codes: dict[str, int] = {}
        try:
            for tuner_id, proc in self.procs.items():
                codes[tuner_id] = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            self.kill_all()
        return codes

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def progress(self, tuner_id: str) -> Progress | None:
        try:
            return Progress.from_json((self.ckpt / progress_key(tuner_id)).read_text())
        except (OSError, ValueError):
            return None

    def wait_until(self, pred: Any, timeout: float = 180, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for tuner_id, proc in self.procs.items():
                if proc.poll() is not None and proc.returncode != 0:
                    raise AssertionError(f"{tuner_id} exited {proc.returncode} before {what}")
            ended = all(proc.poll() is not None for proc in self.procs.values())
            value = pred()
            if value:
                return value
            if ended:
                raise AssertionError(f"the search ended before {what}")
            time.sleep(0.005)
        raise AssertionError(f"{what}: not reached in time")

    def text(self, tuner_id: str) -> str:
        return self.log(tuner_id).read_text(errors="replace")

    def oracle_state(self, project: str = "search") -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (self.ckpt / TUNER_DIR / project / "oracle.json").read_text()
        )
        return data


EPOCH_LINE = re.compile(r"trial (\w+) fit (\d+) epoch (\d+):")


def epoch_lines(text: str) -> list[tuple[str, int, int]]:
    """(trial, execution, epoch) of every epoch a spec-mode trainer trained to its end."""
    return [(m[1], int(m[2]), int(m[3])) for m in EPOCH_LINE.finditer(text)]


def mid_epoch_checkpoint(ckpt: Path, trial_id: str) -> int:
    """The highest mid-epoch step of a committed checkpoint of `trial_id` (0 if none)."""
    fits = (ckpt / spec_trial(trial_id)).glob("fit-*")
    return max((step for fit in fits for _, step in positions(fit)), default=0)
