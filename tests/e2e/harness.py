"""Helpers shared by the operator's end-to-end tests and `make demo`: install the CRDs,
run the real operator (`python -m tuneop`) as a subprocess against a cluster, submit and
read TuningJobs and Events (:class:`Env`: what an e2e test gets from the `e2e` fixture).
Test infrastructure; nothing here is faked."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import tuneop_contract as contract
import yaml
from kubernetes import client
from tuneop.api.names import GROUP, PLURAL, VERSION

from hack.images import image_tag
from tests.localcluster.cluster import LocalCluster, wait_for
from tests.localcluster.controlplane import free_port

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "manifests" / "crd"
SAMPLE = ROOT / "manifests" / "samples" / "tuningjob-emg.yaml"
SCRIPT_SAMPLE = ROOT / "manifests" / "samples" / "tuningjob-script.yaml"
SCRIPT_FILE = ROOT / "manifests" / "samples" / "emg_search.py"
PYTHONPATH = os.pathsep.join(
    str(ROOT / p) for p in ("contract", "operator", "trainer_image", "client", ".")
)

SEARCH: dict[str, Any] = {
    # Long enough (about 20 steps an epoch) to be disrupted mid-trial after a checkpoint,
    # small enough for a couple of minutes on one CPU; deterministic so a disrupted run
    # can be compared with an undisturbed one.
    "data": {"synthetic": {"samples": 768, "seed": 0}, "validationSplit": 0.25},
    "tuner": {
        "algorithm": "Hyperband",
        "objective": {"name": "val_accuracy", "direction": "max"},
        "maxEpochs": 2,
        "factor": 2,
        "hyperbandIterations": 1,
        "seed": 7,
        "batchSize": 32,
        "deterministic": True,
    },
    "checkpoint": {"size": "1Gi", "intervalSteps": 3, "intervalSeconds": 30, "keep": 2},
    "resources": {},
    "terminationGracePeriodSeconds": 30,
}
STEPS_PER_EPOCH = 768 * 3 // 4 // 32  # training samples // batch size
SCRIPT_SEARCH: dict[str, Any] = {
    # The script's own search (SCRIPT_FILE); a small interval, so a trial disrupted
    # mid-epoch has a checkpoint at a step > 0.
    "checkpoint": {"size": "1Gi", "intervalSteps": 3, "intervalSeconds": 30},
    "resources": {},
    "terminationGracePeriodSeconds": 30,
}
SCRIPT_CONFIGMAP = "emg-search"
"""The ConfigMap the script sample names (SCRIPT_FILE its only key)."""
SESSION_PRIORITY = 100
"""kopf peering priority of the session's operator."""


class Kubectl:
    """kubectl with a given kubeconfig (the binary the control plane harness built)."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)

    def apply(self, *objects: dict[str, Any]) -> None:
        self("apply", "-f", "-", input=yaml.safe_dump_all(objects))

    def install_crds(self) -> None:
        self("apply", "--server-side", "-f", str(CRD_DIR))
        for path in sorted(CRD_DIR.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    self(
                        "wait",
                        "--for=condition=Established",
                        "--timeout=60s",
                        f"crd/{doc['metadata']['name']}",
                    )

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        result = self("get", "tj", name, "-n", namespace, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        items = self.json(
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            f"involvedObject.kind=TuningJob,involvedObject.name={name}",
        )["items"]
        # second-precision timestamps tie; the creation resourceVersion orders them
        return sorted(
            items,
            key=lambda e: (e.get("lastTimestamp") or "", int(e["metadata"]["resourceVersion"])),
        )

    def pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return list(
            self.json("get", "pods", "-n", namespace, "-l", f"tuneop.io/tuningjob={job}")["items"]
        )


def claim_dir(kubectl: Kubectl, namespace: str, job: str) -> Path:
    """The host directory behind the job's created claim (the local-path provisioner's)."""
    pvc = kubectl.json("get", "pvc", f"{job}-ckpt", "-n", namespace)
    pv = kubectl.json("get", "pv", pvc["spec"]["volumeName"])
    return Path(pv["spec"]["local"]["path"])


def trainer_progress(kubectl: Kubectl, namespace: str, pod: str) -> dict[str, Any] | None:
    """The trainer's live progress record from its /progress endpoint (pod IP, metrics
    port), fresher than status.progress (which the trainer patches every ~3 s); when
    another process answers there instead, the record on the job's claim (see
    `progress_at`). None when neither has one yet."""
    ip, _ = _pod_ip_and_ended(kubectl, namespace, pod)
    job = pod.rsplit("-worker-", 1)[0]
    return None if not ip else progress_at(kubectl, namespace, job, pod, ip)


def progress_at(
    kubectl: Kubectl,
    namespace: str,
    job: str,
    pod: str,
    ip: str,
    tuner_id: str | None = None,
    claim: Path | None = None,
) -> dict[str, Any] | None:
    """`pod`'s trainer record from its endpoint at `ip`; while another process answers
    there (local pods share the host's network: any process may hold the port), the
    record on the job's claim (`claim`: its directory, when the caller looked it up)."""
    url = f"http://{ip}:{contract.DEFAULT_METRICS_PORT}/progress"
    progress, other = fetch_progress(url, pod)
    if other:
        return claim_progress(kubectl, namespace, job, tuner_id, claim)
    return progress


def claim_progress(
    kubectl: Kubectl,
    namespace: str,
    job: str,
    tuner_id: str | None = None,
    claim: Path | None = None,
) -> dict[str, Any] | None:
    """The progress record the job's trainer wrote on its claim (the local volume's host
    directory), in the endpoint's form: what the endpoint would have said, for when
    another process holds the trainer's port (status.progress is a few seconds old,
    too coarse to find a step in the middle of an epoch of a short search)."""
    try:
        path = (claim or claim_dir(kubectl, namespace, job)) / contract.progress_key(tuner_id)
        progress = contract.Progress.from_json(path.read_text())
    except (OSError, ValueError, KeyError, RuntimeError):  # no claim or record yet
        return None
    return None if progress is None else dataclasses.asdict(progress)


def fetch_progress(url: str, pod: str) -> tuple[dict[str, Any] | None, bool]:
    """(the progress record at `url` if the trainer of `pod` answered it, else None;
    whether something else answered)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            if response.headers.get(contract.PROGRESS_POD_HEADER) != pod:
                return None, True
            return dict(json.loads(response.read())), False
    except urllib.error.HTTPError as err:  # an answer, an error status: whose?
        return None, err.headers.get(contract.PROGRESS_POD_HEADER) != pod
    except (OSError, ValueError):
        return None, False


def _pod_ip_and_ended(kubectl: Kubectl, namespace: str, pod: str) -> tuple[str | None, bool]:
    """(the pod's IP if it has one, whether its containers have ended)."""
    result = kubectl("get", "pod", pod, "-n", namespace, "-o", "json", check=False)
    if result.returncode != 0:
        return None, False
    status = json.loads(result.stdout).get("status") or {}
    return status.get("podIP"), status.get("phase") in ("Succeeded", "Failed")


def wait_mid_epoch(
    kubectl: Kubectl,
    namespace: str,
    job: str,
    steps_per_epoch: int,
    timeout: float = 300,
    min_step: int = 2,
    *,
    pod: str | None = None,
    tuner_id: str | None = None,
    any_trial: bool = False,
) -> dict[str, Any]:
    """Until `pod`'s trainer (the job's first by default) is in a trial after the first
    one (`any_trial`: in any trial), in the middle of an epoch (at `min_step` or later),
    so that a disruption now makes it resume at a step > 0. A step takes ~0.05 s here:
    the trainer's own endpoint is polled every 20 ms at the pod IP read every 2 s (a
    kubectl call takes longer than the window); while another process holds the
    trainer's port, the progress file on its claim. Fails as soon as the pod has ended."""
    pod = pod or f"{job}-worker-0"
    # in the epoch's first half: the disruption that follows lands seconds later (the
    # API, the node agent, a loaded machine), still before the epoch's end
    high = max(min_step + 2, steps_per_epoch // 2)
    deadline = time.monotonic() + timeout
    ip, ended, read_at = None, False, 0.0
    claim: Path | None = None  # looked up once: two kubectl calls are longer than the window
    while time.monotonic() < deadline:
        if time.monotonic() - read_at > 2:
            ip, ended = _pod_ip_and_ended(kubectl, namespace, pod)
            read_at = time.monotonic()
            if claim is None:
                try:
                    claim = claim_dir(kubectl, namespace, job)
                except (RuntimeError, KeyError, TypeError):  # not bound yet
                    claim = None
        if ended:
            raise AssertionError(f"{pod} finished before it could be disrupted")
        progress = (
            None if ip is None else progress_at(kubectl, namespace, job, pod, ip, tuner_id, claim)
        )
        if progress is not None and _mid_epoch(progress, min_step, high, any_trial):
            return progress
        time.sleep(0.02)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {pod} mid-epoch")


def _mid_epoch(progress: dict[str, Any], low: int, high: int, any_trial: bool) -> bool:
    if progress.get("phase") in (contract.PHASE_COMPLETED, contract.PHASE_FAILED):
        raise AssertionError(f"finished before it could be disrupted: {progress}")
    in_trial = (
        bool(progress.get("trial_id"))
        if any_trial
        else ((progress.get("trials_completed") or 0) >= 1)
    )
    step = progress.get("step") or 0
    return in_trial and progress.get("phase") == contract.PHASE_RUNNING and low <= step <= high


def sample(name: str = "emg-cnn", namespace: str = "default", **spec: Any) -> dict[str, Any]:
    """The sample TuningJob with a new name/namespace and spec fields replaced."""
    doc = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"].update(spec)
    return dict(doc)


def script_sample(
    name: str = "emg-script", namespace: str = "default", **spec: Any
) -> dict[str, Any]:
    """The script-mode sample TuningJob (runs SCRIPT_FILE from ConfigMap emg-search),
    with a new name/namespace and spec fields replaced."""
    doc = yaml.safe_load(SCRIPT_SAMPLE.read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"].update(spec)
    return dict(doc)


class Operator:
    """The real operator as a subprocess (`python -m tuneop`), log to a file."""

    def __init__(self, kubeconfig: Path, log_path: Path, **env: str) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "PYTHONPATH": PYTHONPATH,
            "TUNEOP_OPERATOR_METRICS_PORT": str(self.metrics_port),
            "TUNEOP_OPERATOR_HEALTH_PORT": str(self.health_port),
            "TUNEOP_OPERATOR_RECONCILE_SECONDS": "1",
            # the chart's default trainer image: the samples name none
            "TUNEOP_OPERATOR_TRAINER_IMAGE": f"tuneop/trainer:{image_tag()}",
            # trainers report steady progress every 3 s (the product's default is 60):
            # the tests wait on it
            "TUNEOP_OPERATOR_PROGRESS_INTERVAL_SECONDS": "3",
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Operator:
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tuneop"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_for(self.healthy, 60, "operator liveness endpoint")
        return self

    def healthy(self) -> bool:
        import urllib.request

        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"operator exited; log:\n{self.log_tail()}")
        with contextlib.suppress(OSError):
            url = f"http://127.0.0.1:{self.health_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        return False

    def metrics(self) -> str:
        import urllib.request

        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def leads(self) -> bool:
        """Whether this replica is the active one (its `tuneop_operator_leader`); False
        while its metrics do not answer."""
        try:
            return "tuneop_operator_leader 1.0" in self.metrics()
        except OSError:
            return False

    def counters(self, *names: str) -> dict[str, float]:
        """The operator-wide series `names` (no labels) as they read now."""
        lines = [line.split() for line in self.metrics().splitlines()]
        return {line[0]: float(line[1]) for line in lines if len(line) == 2 and line[0] in names}

    def kill(self) -> None:
        """SIGKILL: an operator crash at an arbitrary instant."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_count(self, *needles: str) -> int:
        """Lines of the operator's log that contain every one of `needles`."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return 0
        return sum(all(n in line for n in needles) for line in lines)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    """The status condition of type `type_`, or {} while there is none."""
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def required_condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    """The status condition of type `type_`; AssertionError if there is none."""
    for cond in status.get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    raise AssertionError(f"no condition {type_} in {status.get('conditions')}")


def dry_run_rejected(kubectl: Kubectl, job: dict[str, Any]) -> str:
    """What the API server says refusing a server-side dry-run create of `job` (the
    CRD's schema and CEL rules); AssertionError if it accepts it."""
    result = kubectl(
        "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(job), check=False
    )
    assert result.returncode != 0, f"accepted: {job['spec']}"
    return result.stderr


class Env:
    """What a test needs: kubectl, the operator process, the cluster."""

    def __init__(self, cluster: LocalCluster, kubectl: Kubectl, operator: Operator) -> None:
        self.cluster = cluster
        self.kubectl = kubectl
        self.operator = operator
        self._namespaces = 0

    def namespace(self, prefix: str) -> str:
        """A fresh namespace, ready for pods: its default ServiceAccount and the
        kube-root-ca.crt ConfigMap (the trainer's API access needs ca.crt) exist."""
        self._namespaces += 1
        ns = self.cluster.create_namespace(f"{prefix}-{self._namespaces}")
        wait_for(
            lambda: (
                self.kubectl("get", "cm", "kube-root-ca.crt", "-n", ns, check=False).returncode == 0
            ),
            60,
            f"kube-root-ca.crt in {ns}",
        )
        return ns

    def quota(self, namespace: str, name: str, hard: dict[str, str]) -> None:
        """A ResourceQuota, in force once this returns: its status (the quota
        controller's count) is published. A pod created sooner can pass admission: the
        API server's quota check keeps a namespace's "no quota" for up to 30 s."""
        quota = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": hard},
        }
        self.kubectl.apply(quota)
        wait_for(
            lambda: bool(
                ((self.kubectl.json("get", "resourcequota", name, "-n", namespace) or {})
                 .get("status") or {}).get("hard")
            ),
            60,
            f"ResourceQuota {name} counted",
        )  # fmt: skip

    def submit(
        self,
        namespace: str,
        name: str = "search",
        *,
        search: dict[str, Any] = SEARCH,
        labels: dict[str, str] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        """Apply the sample TuningJob with the fields of `search` (SEARCH by default) and
        then of `spec` replaced, with `labels` if given; returns what was applied."""
        job = sample(name, namespace, **{**search, **spec})
        if labels is not None:
            job["metadata"]["labels"] = dict(labels)
        self.kubectl.apply(job)
        return job

    def submit_script(self, namespace: str, name: str = "search", **spec: Any) -> dict[str, Any]:
        """Apply the script-mode sample with the fields of SCRIPT_SEARCH and then of
        `spec` replaced; returns what was applied."""
        job = script_sample(name, namespace, **{**SCRIPT_SEARCH, **spec})
        self.kubectl.apply(job)
        return job

    def create_script_configmap(self, namespace: str) -> None:
        """The script sample's ConfigMap, created as the sample's header tells users to."""
        self.kubectl(
            "create", "configmap", SCRIPT_CONFIGMAP, "-n", namespace, f"--from-file={SCRIPT_FILE}"
        )

    def job(self, namespace: str, name: str = "search") -> dict[str, Any]:
        """The TuningJob, read with the cluster's API client: the waits read it every
        second, and a kubectl process a read costs the CPU the trainers under test need."""
        api = client.CustomObjectsApi(self.cluster.api)
        try:
            job = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except client.ApiException as err:
            if err.status == 404:
                raise AssertionError(f"TuningJob {namespace}/{name} not found") from None
            raise
        return dict(job)

    def status(self, namespace: str, name: str = "search") -> dict[str, Any]:
        return dict(self.job(namespace, name).get("status") or {})

    def wait_status(
        self, namespace: str, predicate: Any, timeout: float, what: str, name: str = "search"
    ) -> dict[str, Any]:
        try:
            return wait_for(
                lambda: (s := self.status(namespace, name)) and predicate(s) and s,
                timeout,
                what,
                every=1.0,
            )
        except TimeoutError as err:
            raise AssertionError(f"{err}\n{self.diagnose(namespace, name)}") from None

    def wait_phase(
        self, namespace: str, phase: str, timeout: float = 300, name: str = "search"
    ) -> dict[str, Any]:
        return self.wait_status(
            namespace, lambda s: s.get("phase") == phase, timeout, f"phase {phase}", name
        )

    def wait_mid_trial(
        self, namespace: str, name: str = "search", min_step: int = 2
    ) -> dict[str, Any]:
        """Until the trainer is mid-epoch in a trial after the first one (its own
        /progress endpoint; SEARCH has 18 steps an epoch)."""
        self.wait_phase(namespace, "Running", timeout=120, name=name)
        try:
            return wait_mid_epoch(self.kubectl, namespace, name, STEPS_PER_EPOCH, min_step=min_step)
        except (TimeoutError, AssertionError) as err:
            raise AssertionError(f"{err}\n{self.diagnose(namespace, name)}") from None

    def claim_dir(self, namespace: str, name: str = "search") -> Path:
        """The host directory behind the job's checkpoint claim."""
        return claim_dir(self.kubectl, namespace, name)

    def reasons(self, namespace: str, name: str = "search") -> list[str]:
        return [e["reason"] for e in self.kubectl.events(namespace, name)]

    def diagnose(self, namespace: str, name: str = "search") -> str:
        parts = []
        with contextlib.suppress(Exception):
            parts.append("status: " + json.dumps(self.status(namespace, name), indent=1))
        with contextlib.suppress(Exception):
            parts.append(self.kubectl("get", "pods,events", "-n", namespace).stdout)
        with contextlib.suppress(Exception):
            for pod in self.kubectl.pods(namespace, name):
                pod_name = pod["metadata"]["name"]
                logs = self.kubectl("logs", "-n", namespace, pod_name, check=False).stdout
                parts.append(f"--- logs {pod_name}:\n" + "\n".join(logs.splitlines()[-30:]))
        parts.append("--- operator log:\n" + self.operator.log_tail(40))
        return "\n".join(parts)


def fetch_results(e2e: Env, ns: str, job: str, dest: Path) -> subprocess.CompletedProcess[str]:
    """hack/fetch-results.sh as README shows it, with this cluster's kubectl."""
    kubectl = f"{e2e.kubectl.binary} --kubeconfig {e2e.kubectl.kubeconfig}"
    return subprocess.run(
        [str(ROOT / "hack" / "fetch-results.sh"), job, ns, str(dest)],
        env={**os.environ, "KUBECTL": kubectl, "TIMEOUT": "120"},
        capture_output=True,
        text=True,
        timeout=180,
    )
