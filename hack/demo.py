"""`make demo`: the whole flow on the local control plane.

Starts a real control plane and a real node (tests/localcluster: the kubelet over
containerd and runc, with the images `make images-cpu` built), installs the CRDs and the
chart (`helm install`: the operator's two replicas run as containers of
`tuneop/operator`), applies manifests/samples/tuningjob-emg.yaml with the CPU trainer
image (this machine has no GPU), shows containerd's own listing of the trainer's
container,
evicts the trainer pod midway (the Eviction API, as `kubectl drain` does), shows the
status and the resume, says what the preemption cost (steps redone, seconds from the
eviction to the next training step), prints the best hyperparameters and a summary
table, writes a PNG of each trial's objective over time with the preemption marked
(hack/demo_plot.py; its path is printed; DEMO_PLOT overrides it) and tears everything
down.
Exits non-zero if the job did not complete or did not resume after the preemption.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for sub in ("contract", "operator", "trainer_image", "."):
    sys.path.insert(0, str(ROOT / sub))

from hack import demo_plot  # noqa: E402
from hack.images import BuildError, image_tag  # noqa: E402
from tests.e2e.harness import (  # noqa: E402
    Kubectl,
    claim_dir,
    sample,
    wait_for,
    wait_mid_epoch,
)
from tests.localcluster import disruption  # noqa: E402
from tests.localcluster.cluster import LocalCluster  # noqa: E402
from tests.localcluster.controlplane import ControlPlane  # noqa: E402
from tests.localcluster.kubelet.node import KubeletNode, real_node_config  # noqa: E402

NAME, NAMESPACE = "emg-cnn", "default"
RELEASE = "tuneop"  # helm release and namespace of the operator
CPU_IMAGE = f"tuneop/trainer:{image_tag()}-cpu"


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def stopped_at_step(status: Any) -> int | None:
    """The step of the evicted trainer's preemption checkpoint: its last progress report
    (phase Preempted, written just before it exits 75) while the status still shows it,
    else the step the new pod resumed at (it resumes from the latest checkpoint, which
    is that one); None if neither comes."""

    def seen() -> tuple[int] | None:
        s = status()
        progress = s.get("progress") or {}
        if progress.get("phase") == "Preempted":
            return (int(progress.get("step", 0)),)
        if s.get("restores", 0) >= 1 and progress.get("resumedFromStep") is not None:
            return (int(progress["resumedFromStep"]),)
        return None

    try:
        found = wait_for(seen, 300, "the preemption checkpoint or the restore", every=0.1)
    except TimeoutError:
        return None
    return found[0]


def write_plot(
    kubectl: Kubectl,
    namespace: str,
    final: dict[str, Any],
    applied_at: float,
    outage: demo_plot.Outage,
) -> Path | None:
    """The PNG of the search on the claim: results.json's scores, each trial's end from
    its trial.json (written when the trial ends; this cluster's claims are host
    directories, so the file times are the host's clock, like `applied_at`). None (and
    says why) if the claim holds no results."""
    root = claim_dir(kubectl, namespace, NAME)
    try:
        results = json.loads((root / "results.json").read_text())
        ended = {
            trial.parent.name.removeprefix("trial_"): trial.stat().st_mtime - applied_at
            for trial in (root / "tuner").glob("*/trial_*/trial.json")
        }
    except (OSError, ValueError) as err:
        print(f"no plot: the search on the claim could not be read ({err})")
        return None
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    default = Path(os.environ.get("TUNEOP_CACHE", Path.home() / ".cache" / "tuneop"))
    path = Path(os.environ.get("DEMO_PLOT") or default / "demo" / f"{NAME}-{stamp}.png")
    path.parent.mkdir(parents=True, exist_ok=True)
    objective = results.get("objective") or {}
    demo_plot.plot(
        demo_plot.trial_points(results, ended),
        [outage],
        path,
        objective=str(objective.get("name") or (final.get("progress") or {}).get("objective")),
        direction=str(objective.get("direction") or "max"),
        title=f"TuningJob {namespace}/{NAME}: each trial's objective, the preemption marked",
    )
    return path


def preemption_cost(
    status: Any, evicted_at: float, stopped_step: int | None
) -> tuple[str, float | None]:
    """Steps redone and seconds from the eviction to the next training step, and when
    (time.monotonic()) that step was seen."""
    progress: dict[str, Any] = {}

    def trained_again() -> bool:
        nonlocal progress
        progress = dict(status().get("progress") or {})
        resumed = progress.get("resumedFromStep")
        return resumed is not None and (
            progress.get("step", 0) > resumed
            or progress.get("epoch", 0) > progress.get("resumedFromEpoch", 0)
        )

    try:
        wait_for(trained_again, 300, "the next training step", every=0.2)
    except TimeoutError:
        return "", None
    trained_at = time.monotonic()
    seconds = trained_at - evicted_at
    resumed = int(progress.get("resumedFromStep") or 0)
    redone = "unknown" if stopped_step is None else str(max(0, stopped_step - resumed))
    return (
        f"steps redone: {redone} (SIGTERM checkpointed step {stopped_step}, the new pod resumed "
        f"at step {resumed})\n"
        f"time from the eviction to the next training step: {seconds:.1f} s (old pod's "
        "checkpoint and exit, new pod scheduled, TensorFlow start-up, restore)"
    ), trained_at


def summary_table(status: dict[str, Any]) -> str:
    """The run in one table: the search, what preemption cost, the GPU time."""
    goodput = status.get("goodput") or {}
    best = status.get("bestTrial") or {}
    rows = [
        ("trials", status.get("trials")),
        ("best trial", f"{best.get('id')} (score {best.get('score')})"),
        ("preemptions", status.get("preemptions")),
        ("restores (resumed at a step)", status.get("restores")),
        ("failures", status.get("failures")),
        ("recovery: loss -> next training step", f"{goodput.get('lastRecoverySeconds')} s"),
        ("GPU-seconds allocated", goodput.get("allocatedGpuSeconds")),
        ("GPU-seconds lost to preemption", goodput.get("lostGpuSeconds")),
        ("goodput", f"{goodput.get('percent')} %"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


@dataclasses.dataclass
class Demo:
    """The demo's cluster, operator and job, and what it measured."""

    work: Path
    kubectl: Kubectl
    cluster: LocalCluster
    namespace: str = NAMESPACE
    applied_at: float = 0.0  # wall clock: compared with the claim's file times
    evicted_at: float = 0.0  # time.monotonic() of the eviction
    evicted_wall: float = 0.0
    stopped_step: int | None = None
    cost: str = ""
    trained_at: float | None = None
    spec: dict[str, Any] = dataclasses.field(default_factory=dict)  # fields set over the sample
    node: KubeletNode | None = None

    def status(self) -> dict[str, Any]:
        job = self.kubectl.job(self.namespace, NAME) or {}
        return dict(job.get("status") or {})

    def show(self) -> None:
        print(self.kubectl("get", "tj", "-n", self.namespace).stdout.rstrip(), flush=True)

    def last_seen(self) -> str:
        """One line: what the job last reported (for a wait that gave up)."""
        try:
            s = self.status()
        except Exception as err:  # the API server itself may be what failed
            return f"the job's status could not be read ({str(err).splitlines()[0]})"
        fields = ("phase", "trials", "preemptions", "restores", "message")
        return " ".join(f"{k}={s[k]!r}" for k in fields if s.get(k) not in (None, ""))


def submit(demo: Demo) -> None:
    ns = demo.namespace
    wait_for(
        lambda: (
            demo.kubectl("get", "cm", "kube-root-ca.crt", "-n", ns, check=False).returncode == 0
        ),
        60,
        "the namespace's kube-root-ca.crt",
    )
    changed = "".join(f", spec.{k}: {v}" for k, v in demo.spec.items())
    say(f"kubectl apply -f manifests/samples/tuningjob-emg.yaml{changed}")
    demo.kubectl.apply(sample(NAME, ns, **demo.spec))
    demo.applied_at = time.time()


def preempt(demo: Demo) -> None:
    """Evict the trainer mid-epoch in a later trial; wait for the resume and its cost."""
    say("waiting for the trainer to be mid-epoch in its second trial or later")
    wait_for(lambda: demo.status().get("phase") == "Running", 300, "the trainer running")
    job = sample(NAME, demo.namespace)
    data = job["spec"]["data"]
    train = int(data["synthetic"]["samples"] * (1 - data["validationSplit"]))
    steps = train // job["spec"]["tuner"]["batchSize"]
    p = wait_mid_epoch(demo.kubectl, demo.namespace, NAME, steps, timeout=600)
    demo.show()
    if demo.node is not None:
        say("containerd's own listing of the node's containers (what `crictl ps` shows)")
        print("\n".join(demo.node.containers()), flush=True)
    say(f"evicting the trainer pod during trial {p['trial_id']} at step {p['step']}")
    demo.evicted_at, demo.evicted_wall = time.monotonic(), time.time()
    disruption.evict_pod(demo.cluster.api, demo.namespace, f"{NAME}-worker-0")
    wait_for(lambda: demo.status().get("preemptions", 0) >= 1, 120, "the preemption")
    demo.stopped_step = stopped_at_step(demo.status)
    demo.show()
    say("waiting for the recreated trainer to resume from its checkpoint")
    wait_for(lambda: demo.status().get("restores", 0) >= 1, 300, "the restore", every=0.5)
    p = demo.status()["progress"]
    print(f"resumed trial {p['trialId']} at step {p.get('resumedFromStep')}", flush=True)
    demo.cost, demo.trained_at = preemption_cost(demo.status, demo.evicted_at, demo.stopped_step)


def wait_completed(demo: Demo, timeout: float = 900) -> dict[str, Any]:
    """Follow `kubectl get tj` until the job ends (or `timeout`); its final status."""
    say("waiting for the search to complete")
    last = ""
    deadline = time.monotonic() + timeout
    while demo.status().get("phase") not in ("Succeeded", "Failed"):
        if time.monotonic() > deadline:
            break
        line = demo.kubectl("get", "tj", "-n", demo.namespace, "--no-headers").stdout.strip()
        if line.split()[:3] != last.split()[:3]:
            print(line, flush=True)
            last = line
        time.sleep(2)
    say("kubectl get tj")
    demo.show()
    say("events")
    for event in demo.kubectl.events(demo.namespace, NAME):
        print(f"{event['type']:8} {event['reason']:12} {event['message']}")
    return demo.status()


def report(demo: Demo, final: dict[str, Any]) -> bool:
    """Print the cost, the best trials, the summary and the plot; whether the job
    completed after a preemption and a restore."""
    if demo.cost:
        say("what the preemption cost")
        print(demo.cost, flush=True)
    best = final.get("bestTrial") or {}
    objective = final.get("progress", {}).get("objective")
    say(f"best trial {best.get('id')} ({objective} {best.get('score')}):")
    print(json.dumps(best.get("hyperparameters"), indent=2, sort_keys=True))
    say("the best trials (status.topTrials)")
    for trial in final.get("topTrials") or []:
        hps = json.dumps(trial.get("hyperparameters"), sort_keys=True)
        print(f"{trial['id']:>6}  {trial['score']:.4f}  {hps}")
    say("summary")
    print(summary_table(final), flush=True)
    lost = demo.evicted_wall - demo.applied_at
    # the operator's figure (the trainer's own time of its next step); the demo's
    # own one waits for that step to reach the status, seconds later
    recovery = (final.get("goodput") or {}).get("lastRecoverySeconds")
    if recovery is None and demo.trained_at is not None:
        recovery = demo.trained_at - demo.evicted_at
    outage = demo_plot.Outage(lost, None if recovery is None else lost + recovery)
    plot = write_plot(demo.kubectl, demo.namespace, final, demo.applied_at, outage)
    if plot is not None:
        say(f"plot of each trial's objective over time, the preemption marked: {plot}")
    return bool(
        final.get("phase") == "Succeeded"
        and final.get("preemptions", 0) >= 1
        and final.get("restores", 0) >= 1
    )


def start_cluster(work: Path, cp: ControlPlane) -> tuple[LocalCluster, KubeletNode]:
    """The control plane and one real node, untainted, with the built images."""
    cp.start()
    cluster = LocalCluster(cp, work / "cluster", nodes=[])
    cluster.start()
    config = real_node_config("trainer-cpu", "operator", name="gpu-node-0", taints=[])
    node = cluster.add_real_node(config)
    return cluster, node


def install_operator(demo: Demo) -> None:
    """`helm install` the chart; wait for its two replicas, containers of the image."""
    cp = demo.cluster.control_plane
    say(f"helm install {RELEASE} charts/tuneop --namespace {RELEASE} --create-namespace")
    done = cp.helm("install", RELEASE, str(ROOT / "charts" / "tuneop"), "--namespace",
                   RELEASE, "--create-namespace")  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"helm install failed: {done.stderr.strip()}")

    def running() -> bool:
        pods = demo.kubectl.json("get", "pods", "-n", RELEASE)["items"]
        return len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)

    wait_for(running, 180, "the operator's two pods Running")
    print(demo.kubectl("get", "pods", "-n", RELEASE, "-o", "wide").stdout.rstrip(), flush=True)


def operator_logs(demo: Demo, lines: int) -> str:
    selector = f"app.kubernetes.io/instance={RELEASE}"
    got = demo.kubectl("logs", "-n", RELEASE, "-l", selector, f"--tail={lines}", check=False)
    return got.stdout + got.stderr


def run(demo: Demo) -> bool:
    """Install, submit, preempt, follow to the end and report; whether it passed."""
    say("make install: applying manifests/crd/")
    demo.kubectl.install_crds()
    install_operator(demo)
    submit(demo)
    preempt(demo)
    final = wait_completed(demo)
    if report(demo, final):
        say("demo OK: preempted, resumed from the checkpoint, completed")
        return True
    say(
        f"demo FAILED: phase={final.get('phase')} preemptions={final.get('preemptions')} "
        f"restores={final.get('restores')}"
    )
    print(operator_logs(demo, 40))
    return False


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="tuneop-demo-"))
    say(f"starting the local control plane and a real node, gpu-node-0 (state in {work})")
    cp = ControlPlane(work / "controlplane")
    cluster: LocalCluster | None = None
    demo: Demo | None = None
    passed = False
    try:
        cluster, node = start_cluster(work, cp)
        kubectl = Kubectl(cp.bin_dir / "kubectl", cp.kubeconfig)
        demo = Demo(work, kubectl, cluster, spec={"image": CPU_IMAGE}, node=node)
        passed = run(demo)
        return 0 if passed else 1
    except KeyboardInterrupt:
        say(f"demo interrupted; logs kept in {work}")
        return 130
    except (Exception, BuildError) as err:  # one line at the terminal, never a traceback
        what = str(err).splitlines()[0] if str(err) else type(err).__name__
        say(f"demo FAILED: {what}")
        if demo is not None:
            print(f"the job last reported: {demo.last_seen()}")
            print(operator_logs(demo, 20))
        print(f"logs kept in {work}")
        return 1
    finally:
        say("tearing down")
        if cluster is not None:
            cluster.stop()
        cp.stop()
        if passed:  # keep the logs of a failed demo
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
