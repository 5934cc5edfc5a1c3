"""One pod on the local node: its processes, restarts, status and deletion (test infra).

A :class:`PodWorker` thread per pod. It sets up the pod's volumes, runs the init
containers one after the other and then all containers (each through :mod:`.launch`
in a private mount namespace), restarts them per restartPolicy (backoff 1 s doubling
to 20 s; the kubelet's is 10 s to 5 min), patches ``status`` whenever it changes, and on
deletion sends SIGTERM, waits up to the deletion grace period, SIGKILLs the process
group, reports the final state and deletes the pod with grace 0.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client

from tests.forkserver import ForkedProcess

from . import podspec
from .volumes import NotReady, VolumeBuilder, remove_tree

if TYPE_CHECKING:
    from .agent import NodeAgent

LAUNCH_PY = Path(__file__).with_name("launch.py")
TERMINATION_MESSAGE_LIMIT = 4096
BACKOFF_START = 1.0
BACKOFF_MAX = 20.0

log = logging.getLogger("tuneop.nodeagent")


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerRun:
    """One container of the pod and its current/last process."""

    spec: dict[str, Any]
    init: bool
    log_dir: Path
    term_file: Path
    restart_count: int = 0
    proc: subprocess.Popen[bytes] | ForkedProcess | None = None
    started_at: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    last_state: dict[str, Any] = field(default_factory=dict)
    next_start: float = 0.0
    backoff: float = BACKOFF_START
    done: bool = False
    killed: bool = False
    runs: int = 0

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_file(self, previous: bool = False) -> Path:
        index = self.runs - 1 - (1 if previous else 0)
        return self.log_dir / f"{max(index, 0)}.log"


class PodWorker(threading.Thread):
    def __init__(self, agent: NodeAgent, pod: dict[str, Any], pod_ip: str) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.agent = agent
        self.pod = pod
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.pod_ip = pod_ip
        self.dir = agent.workdir / "pods" / self.uid
        self.hosts_path = self.dir / "hosts"
        self.wake = threading.Event()
        self.gone = False
        self.stopping = False  # agent shutting down or crashing
        self.crashed = False
        self.lock = threading.Lock()
        self.containers: list[ContainerRun] = []
        self.volumes: dict[str, tuple[Path, bool]] | None = None
        self.conditions: dict[str, tuple[str, str, str | None]] = {}
        self.phase = "Pending"
        self.start_time = now()
        self.waiting_message: str | None = None
        self.last_status: str | None = None
        self.finished = threading.Event()
        self.token_refresh_at = float("inf")

    # --- events from the agent ----------------------------------------------------
    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        self.wake.set()

    def deleted(self) -> None:
        self.gone = True
        self.wake.set()

    def stop(self, crash: bool = False) -> None:
        self.crashed = crash
        self.stopping = True
        self.wake.set()

    def find(self, container: str) -> ContainerRun | None:
        return next((c for c in self.containers if c.name == container and not c.init), None) or (
            next((c for c in self.containers if c.name == container), None)
        )

    # --- main loop -------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("pod worker %s/%s failed", self.namespace, self.pod_name)
            self._kill_all(signal.SIGKILL)
        finally:
            self.finished.set()

    def _run(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._init_containers()
        terminal_at_start = (self.pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if terminal_at_start:
            self.phase = self.pod["status"]["phase"]
            for c in self.containers:
                c.done = True
        while True:
            try:
                if self.stopping:
                    self._shutdown()
                    return
                if self.gone:
                    self._kill_all(signal.SIGKILL, wait=True)
                    self._cleanup()
                    return
                if self.pod["metadata"].get("deletionTimestamp"):
                    self._terminate()
                    return
                if not terminal_at_start:
                    self._tick()
            except Exception:
                # API hiccups must not kill running containers: retry on the next tick.
                log.exception("pod %s/%s (retrying)", self.namespace, self.pod_name)
                self.wake.wait(1.0)
            self.wake.wait(0.5)
            self.wake.clear()

    def _init_containers(self) -> None:
        spec = self.pod["spec"]
        previous = {
            s["name"]: s
            for key in ("initContainerStatuses", "containerStatuses")
            for s in (self.pod.get("status") or {}).get(key) or []
        }
        for init, key in ((True, "initContainers"), (False, "containers")):
            for c in spec.get(key) or []:
                run = ContainerRun(
                    spec=c,
                    init=init,
                    log_dir=self.dir / "logs" / c["name"],
                    term_file=self.dir / "termination" / c["name"],
                )
                old = previous.get(c["name"])
                if old and "running" in (old.get("state") or {}):
                    # The node crashed under it: that process is gone (SIGKILLed).
                    run.restart_count = int(old.get("restartCount", 0)) + 1
                    run.last_state = {
                        "terminated": {"exitCode": 137, "reason": "Error", "finishedAt": now()}
                    }
                self.containers.append(run)

    def _tick(self) -> None:
        if self.volumes is None:
            try:
                self._setup()
            except NotReady as exc:
                self.waiting_message = str(exc)
                self._report()
                return
            except Exception as exc:  # e.g. the API server is briefly unreachable
                log.warning("pod %s/%s volumes: %s", self.namespace, self.pod_name, exc)
                self.waiting_message = f"volume setup failed (retrying): {exc}"[:500]
                self._report()
                return
            self.waiting_message = None
        if time.monotonic() >= self.token_refresh_at:
            self.builder.refresh_tokens()
            self.token_refresh_at = time.monotonic() + 0.8 * (self.builder.token_lifetime() or 0)
        policy = self.pod["spec"].get("restartPolicy", "Always")
        inits = [c for c in self.containers if c.init]
        mains = [c for c in self.containers if not c.init]
        # Collect exits.
        for c in self.containers:
            if c.proc is not None and c.proc.poll() is not None and "running" in c.state:
                self._record_exit(c)
                if c.init:
                    wanted = c.state["terminated"]["exitCode"] != 0 and policy != "Never"
                else:
                    wanted = podspec.restart_wanted(policy, c.state["terminated"]["exitCode"])
                if wanted:
                    c.next_start = time.monotonic() + c.backoff
                    c.backoff = min(c.backoff * 2, BACKOFF_MAX)
                else:
                    c.done = True
        failed_init = any(
            c.done and c.state["terminated"]["exitCode"] != 0 for c in inits if c.state
        )
        pending_init = next((c for c in inits if not c.done), None)
        if failed_init:
            self.phase = "Failed"
        elif pending_init is not None:
            if not pending_init.running and time.monotonic() >= pending_init.next_start:
                self._start(pending_init)
        else:
            for c in mains:
                if not c.done and not c.running and time.monotonic() >= c.next_start:
                    self._start(c)
            if all(c.done for c in mains):
                codes = [c.state["terminated"]["exitCode"] for c in mains]
                self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
            else:
                # Pending until a container started (e.g. CreateContainerConfigError).
                self.phase = "Running" if any(c.runs for c in mains) else "Pending"
        self._report()

    # --- processes -------------------------------------------------------------------
    def _setup(self) -> None:
        builder = VolumeBuilder(
            self.agent.core,
            self.pod,
            self.dir,
            self.pod_ip,
            self.agent.host_ip,
            self.agent.ca_cert,
        )
        volumes = builder.build()
        self.builder = builder
        lifetime = builder.token_lifetime()
        if lifetime is not None:
            self.token_refresh_at = time.monotonic() + 0.8 * lifetime
        self.hosts_path.write_text(podspec.hosts_file(self.pod, self.pod_ip, []))
        self.agent.refresh_hosts_soon()
        self.volumes = volumes

    def _start(self, c: ContainerRun) -> None:
        if c.runs > 0:
            c.last_state = c.state
            c.restart_count += 1
        c.runs += 1
        c.killed = False
        c.oom_killed = False
        c.log_dir.mkdir(parents=True, exist_ok=True)
        c.term_file.parent.mkdir(parents=True, exist_ok=True)
        c.term_file.write_bytes(b"")
        assert self.volumes is not None
        try:
            env = podspec.container_env(
                self.pod, c.spec, self.pod_ip, self.agent.host_ip, self.builder.lookup,
                self.agent.base_env(self.pod, self.pod_ip),
            )  # fmt: skip
            argv = podspec.container_argv(c.spec, env)
            mounts = [
                {"source": str(self.hosts_path), "target": "/etc/hosts"},
                {
                    "source": str(c.term_file),
                    "target": c.spec.get("terminationMessagePath")
                    or podspec.DEFAULT_TERMINATION_MESSAGE_PATH,
                },
            ]
            for vm in c.spec.get("volumeMounts") or []:
                source, _managed = self.volumes[vm["name"]]
                if vm.get("subPath"):
                    source = source / vm["subPath"]
                    if not source.exists():
                        source.mkdir(parents=True)
                mounts.append(
                    {
                        "source": str(source),
                        "target": vm["mountPath"],
                        "readOnly": bool(vm.get("readOnly")),
                    }
                )
        except Exception as exc:
            # CreateContainerConfigError (missing key, API error): retried like the kubelet.
            c.state = {
                "waiting": {"reason": "CreateContainerConfigError", "message": str(exc)[:500]}
            }
            c.runs -= 1
            c.next_start = time.monotonic() + 2
            return
        workdir = podspec.image_workdir(c.spec)
        if workdir is not None:  # fresh for every run, like a container's own layer
            scratch = self.dir / f"workdir-{c.name}-{c.runs}"
            scratch.mkdir(parents=True, exist_ok=True)
            mounts.append({"source": str(scratch), "target": workdir})
        launch_spec = {
            "argv": argv,
            "env": env,
            "workingDir": workdir or c.spec.get("workingDir") or "/",
            "hostname": podspec.pod_hostname(self.pod),
            "mounts": podspec.mount_order(mounts),
            "createdPaths": str(self.agent.created_paths_file),
        }
        c.proc = self._forked(argv, env, launch_spec, c.log_file()) or self._launched(
            launch_spec, c
        )
        c.started_at = now()
        c.state = {"running": {"startedAt": c.started_at}}
        self.agent.track(c.proc.pid)

    def _forked(
        self, argv: list[str], env: dict[str, str], launch_spec: dict[str, Any], log_file: Path
    ) -> ForkedProcess | None:
        """The container forked from the agent's Python fork server, when it runs
        ``python -m M``, ``python -c CODE`` or ``python FILE`` and adds nothing read at
        interpreter start; else None."""
        forks = self.agent.python_forks
        python_args = argv[1:] if argv[0] == sys.executable else []
        if forks is None or not python_args or not forks.accepts(env):
            return None
        if python_args[0].startswith("-") and python_args[0] not in ("-m", "-c"):
            return None
        try:
            return forks.spawn(python_args, env, None, log_file, container=launch_spec)
        except (OSError, RuntimeError) as exc:
            log.warning("pod %s/%s: fork server: %s (a fresh process)", self.namespace,
                        self.pod_name, exc)  # fmt: skip
            return None

    def _launched(self, launch_spec: dict[str, Any], c: ContainerRun) -> subprocess.Popen[bytes]:
        """The container as a fresh process: launch.py, then its command."""
        spec_file = self.dir / f"launch-{c.name}-{c.runs}.json"
        spec_file.write_text(json.dumps(launch_spec))
        with open(c.log_file(), "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-S", str(LAUNCH_PY), str(spec_file)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd="/",
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )  # fmt: skip

    def _record_exit(self, c: ContainerRun) -> None:
        assert c.proc is not None
        code = c.proc.returncode
        signum = None
        if code < 0:
            signum = -code
            code = 128 + signum
        self._kill_group(c, signal.SIGKILL)
        self.agent.untrack(c.proc.pid)
        try:
            message = c.term_file.read_bytes()[:TERMINATION_MESSAGE_LIMIT].decode(errors="replace")
        except OSError:
            message = ""
        if (
            not message
            and code != 0
            and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        ):
            try:
                lines = c.log_file().read_bytes().decode(errors="replace").splitlines()[-80:]
                message = "\n".join(lines)[-2048:]
            except OSError:
                message = ""
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": podspec.exit_reason(code),
            "startedAt": c.started_at,
            "finishedAt": now(),
            "containerID": self._container_id(c),
        }
        if signum is not None:
            terminated["signal"] = signum
        if message:
            terminated["message"] = message
        c.state = {"terminated": terminated}

    def _kill_group(self, c: ContainerRun, signum: int) -> None:
        if c.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(c.proc.pid, signum)

    def _kill_all(self, signum: int, wait: bool = False) -> None:
        for c in self.containers:
            if c.running:
                c.killed = True
                self._kill_group(c, signum)
        if wait:
            for c in self.containers:
                if c.proc is not None:
                    try:
                        c.proc.wait(10)
                    except subprocess.TimeoutExpired:
                        log.warning("process %s did not die", c.proc.pid)
                    self._kill_group(c, signal.SIGKILL)
                    self.agent.untrack(c.proc.pid)

    def _container_id(self, c: ContainerRun) -> str:
        return f"tuneop://{self.uid}-{c.name}-{c.runs}"

    # --- deletion / shutdown ---------------------------------------------------------
    def _terminate(self) -> None:
        meta = self.pod["metadata"]
        noticed = time.monotonic()
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        deadline = noticed + int(grace)
        for c in self.containers:  # exits not collected by _tick yet
            if c.proc is not None and not c.running and "running" in c.state:
                self._record_exit(c)
                c.done = True
        running = [c for c in self.containers if c.running]
        for c in running:
            with contextlib.suppress(ProcessLookupError):
                c.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        while any(c.running for c in running) and time.monotonic() < deadline:
            if self.gone or self.stopping:
                break
            self.wake.wait(0.1)
            self.wake.clear()
            new_grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
            if new_grace is not None:
                deadline = min(deadline, noticed + int(new_grace))
        for c in running:
            if c.running:
                c.killed = True
                self._kill_group(c, signal.SIGKILL)
        for c in running:
            c.proc.wait()  # type: ignore[union-attr]
            self._record_exit(c)
            c.done = True
        if self.stopping and self.crashed:
            return
        if running or self.phase not in ("Succeeded", "Failed"):
            mains = [c for c in self.containers if not c.init]
            codes = [(c.state.get("terminated") or {}).get("exitCode", 1) for c in mains]
            self.phase = "Succeeded" if codes and all(code == 0 for code in codes) else "Failed"
            for c in self.containers:
                if not c.state.get("terminated") and not c.running:
                    c.state = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown"}}
            if not self.gone:
                self._report()
        if not self.gone:
            try:
                self.agent.core.delete_namespaced_pod(
                    self.pod_name,
                    self.namespace,
                    grace_period_seconds=0,
                    body=client.V1DeleteOptions(
                        grace_period_seconds=0,
                        preconditions=client.V1Preconditions(uid=self.uid),
                    ),
                    _preload_content=False,
                )
            except client.ApiException as exc:
                if exc.status not in (404, 409):
                    raise
        self._cleanup()

    def _shutdown(self) -> None:
        if self.crashed:
            self._kill_all(signal.SIGKILL, wait=True)
            return
        self._kill_all(signal.SIGTERM)
        deadline = time.monotonic() + 3
        while any(c.running for c in self.containers) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._kill_all(signal.SIGKILL, wait=True)
        self._cleanup()

    def _cleanup(self) -> None:
        self.agent.release_ip(self.pod_ip)
        # PV directories live outside the pod dir, so removing it keeps PVC data.
        remove_tree(self.dir, log.warning)

    # --- status --------------------------------------------------------------------
    def _condition(self, kind: str, ok: bool, reason: str | None = None) -> dict[str, Any]:
        status = "True" if ok else "False"
        old = self.conditions.get(kind)
        if old is None or old[0] != status:
            self.conditions[kind] = (status, now(), reason)
        status, when, why = self.conditions[kind]
        return {
            "type": kind,
            "status": status,
            "lastTransitionTime": when,
            "reason": why if status == "False" else None,
            "message": None,
        }

    def _container_status(self, c: ContainerRun) -> dict[str, Any]:
        state: dict[str, Any]
        if c.state:
            state = c.state
            if "terminated" in state and not c.done:
                state = {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off restarting failed container {c.name}",
                    }
                }
        elif self.waiting_message:
            state = {"waiting": {"reason": "ContainerCreating", "message": self.waiting_message}}
        else:
            reason = (
                "PodInitializing" if not c.init and self._initializing() else "ContainerCreating"
            )
            state = {"waiting": {"reason": reason}}
        last = c.last_state
        if "terminated" in c.state and not c.done:
            last = c.state
        status: dict[str, Any] = {
            "name": c.name,
            "image": c.spec.get("image", ""),
            "imageID": c.spec.get("image", ""),
            "ready": "running" in state,
            "started": "running" in state,
            "restartCount": c.restart_count,
            "state": _explicit(state),
            "lastState": _explicit(last) if last else None,
        }
        if c.runs:
            status["containerID"] = self._container_id(c)
        return status

    def _initializing(self) -> bool:
        return any(not c.done for c in self.containers if c.init)

    def status(self) -> dict[str, Any]:
        mains = [c for c in self.containers if not c.init]
        inits = [c for c in self.containers if c.init]
        terminal = self.phase in ("Succeeded", "Failed")
        all_running = bool(mains) and all(c.running for c in mains)
        why = "PodCompleted" if terminal else "ContainersNotReady"
        conditions = [
            self._condition("PodReadyToStartContainers", self.volumes is not None and not terminal),
            self._condition(
                "Initialized",
                not self._initializing() or terminal,
                "ContainersNotInitialized",
            ),
            self._condition("ContainersReady", all_running and not terminal, why),
            self._condition("Ready", all_running and not terminal, why),
        ]
        status: dict[str, Any] = {
            "phase": self.phase,
            "hostIP": self.agent.host_ip,
            "hostIPs": [{"ip": self.agent.host_ip}],
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "conditions": conditions,
            "containerStatuses": [self._container_status(c) for c in mains],
        }
        if inits:
            status["initContainerStatuses"] = [self._container_status(c) for c in inits]
        return status

    def _report(self) -> None:
        status = self.status()
        text = json.dumps(status, sort_keys=True)
        if text == self.last_status:
            return
        try:
            self.agent.core.patch_namespaced_pod_status(
                self.pod_name,
                self.namespace,
                {"metadata": {"uid": self.uid}, "status": status},
                _preload_content=False,
            )
            self.last_status = text
        except client.ApiException as exc:
            if exc.status == 404:
                self.gone = True
            else:
                log.warning("status of %s/%s: %s", self.namespace, self.pod_name, exc)
        except Exception as exc:  # connection errors: report again on the next tick
            log.warning("status of %s/%s: %s", self.namespace, self.pod_name, exc)


def _explicit(state: dict[str, Any]) -> dict[str, Any]:
    """A container state for a strategic-merge patch: the other state kinds (and unset
    optional fields) as explicit nulls, so the merged state has exactly one kind."""
    out: dict[str, Any] = {"waiting": None, "running": None, "terminated": None}
    for kind, value in state.items():
        value = dict(value)
        if kind == "terminated":
            value = {"signal": None, "message": None, "reason": None, **value}
        elif kind == "waiting":
            value = {"message": None, **value}
        out[kind] = value
    return out
