"""TuningJobs whose trainers run as real containers: the CPU trainer image of `make
images-cpu` on a real node (containerd, runc, the kubelet; tests/localcluster/kubelet),
in a namespace that enforces the restricted Pod Security level, with the real operator.

What only a real node shows: the trainer is PID 1 and SIGTERM reaches it (it checkpoints
and exits 75 inside the grace period); uid 1000 writes the claim through fsGroup; the
script ConfigMap's mount is read-only; `kubectl exec`, `cp`, `logs` and `port-forward`
work; a memory limit is enforced by the kernel's cgroup and ends in OOMKilled, recorded
as a FAILED trial (not a preemption); what a script saves to a relative path lands on
the claim, and hack/fetch-results.sh copies results of any size.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest
from tuneop.api import names
from tuneop_contract import EXIT_PREEMPTED, OUTPUTS_DIR, RESULTS_FILE, SCRIPT_DIR

from tests.e2e.harness import Env, fetch_results, wait_for, wait_mid_epoch
from tests.localcluster import disruption
from tests.localcluster.kubelet.node import TOLERATION, KubeletNode

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

IMAGE = "tuneop/trainer:0.1.0-cpu"
HOLD = "tuneop.io/test-hold"
"""A finalizer the test puts on a pod so its final status can be read after the kubelet
is done with it."""
# emg_search.py: 384 samples, validation_split 0.25, batch_size 16
STEPS_PER_EPOCH = 384 * 3 // 4 // 16
BALLAST_SCRIPT = Path(__file__).parent / "scripts" / "ballast_search.py"


def on_real_node(node: KubeletNode) -> dict[str, Any]:
    """spec fields that put a job's pods on the real node, from the CPU image."""
    return {
        "image": IMAGE,
        "tolerations": [TOLERATION],
        "nodeSelector": {"kubernetes.io/hostname": node.config.name},
    }


def restricted_namespace(e2e: Env, prefix: str) -> str:
    ns = e2e.namespace(prefix)
    e2e.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    return ns


def in_pod(e2e: Env, ns: str, pod: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    return e2e.kubectl("exec", "-n", ns, pod, "--", *cmd, check=False)


def test_a_script_trainer_container_checkpoints_on_sigterm_and_resumes(
    e2e: Env, real_node: KubeletNode, tmp_path: Path
) -> None:
    ns = restricted_namespace(e2e, "real")
    e2e.create_script_configmap(ns)
    e2e.submit_script(ns, **on_real_node(real_node))
    e2e.wait_phase(ns, "Running", timeout=180)
    pod = "search-worker-0"
    assert e2e.kubectl.json("get", "pod", pod, "-n", ns)["spec"]["nodeName"] == "real-node-0"
    wait_mid_epoch(e2e.kubectl, ns, "search", STEPS_PER_EPOCH, timeout=240, any_trial=True)
    check_the_container(e2e, ns, pod, tmp_path)
    exit_code, grace_used = evict_and_read_exit(e2e, ns, pod)
    assert exit_code == EXIT_PREEMPTED
    assert grace_used < 60, grace_used  # tuningjob-script.yaml's grace period
    final = e2e.wait_phase(ns, "Succeeded", timeout=400)
    assert final["preemptions"] == 1 and final["failures"] == 0 and final["restores"] == 1
    assert final["trialsCompleted"] == final["trialsTotal"] == 3
    logs = e2e.kubectl("logs", "-n", ns, pod, check=False).stdout
    assert "best hyperparameters:" in logs, logs[-3000:]
    check_the_results(e2e, ns, tmp_path)


def check_the_results(e2e: Env, ns: str, tmp_path: Path) -> None:
    """What the script saved to a relative path is on the claim, written by uid 1000;
    hack/fetch-results.sh brings results of any size back whole: with 60 MB beside it,
    through `kubectl exec` (above the log's MAX_BYTES)."""
    outputs = e2e.claim_dir(ns) / OUTPUTS_DIR
    saved = outputs / "best_model.keras"
    assert zipfile.is_zipfile(saved) and saved.stat().st_uid == 1000
    big = outputs / "weights.bin"
    big.write_bytes(os.urandom(60 << 20))
    fetched = fetch_results(e2e, ns, "search", tmp_path / "results")
    assert fetched.returncode == 0, fetched.stderr
    copy = tmp_path / "results" / OUTPUTS_DIR
    assert (copy / "weights.bin").read_bytes() == big.read_bytes()
    assert (copy / "best_model.keras").read_bytes() == saved.read_bytes()
    assert (tmp_path / "results" / RESULTS_FILE).is_file()


def check_the_container(e2e: Env, ns: str, pod: str, tmp_path: Path) -> None:
    """uid 1000 as PID 1, fsGroup on the claim, the read-only script mount, exec, cp and
    port-forward, on the running trainer."""
    ident = in_pod(e2e, ns, pod, "sh", "-c", "id -u; id -G; cat /proc/1/cmdline | tr '\\0' ' '")
    assert ident.returncode == 0, ident.stderr
    uid, groups, cmdline = ident.stdout.splitlines()
    assert uid == "1000" and "python -m tuneop_trainer" in cmdline, ident.stdout
    claim = in_pod(e2e, ns, pod, "stat", "-c", "%g %a", "/checkpoints")
    group, mode = claim.stdout.split()
    assert group in groups.split() and mode.startswith("2"), claim.stdout  # setgid: fsGroup
    touch = in_pod(e2e, ns, pod, "touch", f"{SCRIPT_DIR}/x")
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr, touch
    mounts = e2e.kubectl.json("get", "pod", pod, "-n", ns)["spec"]["containers"][0]
    assert {m["name"]: m.get("readOnly") for m in mounts["volumeMounts"]}[names.SCRIPT_VOLUME]
    # kubectl cp both ways, a file larger than any log line (the trainer's working
    # directory is writable: the script writes its tuner directory there)
    sent, back = tmp_path / "sent.bin", tmp_path / "back.bin"
    sent.write_bytes(os.urandom(20 << 20))
    e2e.kubectl("cp", str(sent), f"{ns}/{pod}:sent.bin")
    e2e.kubectl("cp", f"{ns}/{pod}:sent.bin", str(back))
    assert back.read_bytes() == sent.read_bytes()
    assert in_pod(e2e, ns, pod, "rm", "sent.bin").returncode == 0
    assert progress_through_port_forward(e2e, ns, pod)["pod"] == pod


def progress_through_port_forward(e2e: Env, ns: str, pod: str) -> dict[str, Any]:
    """The trainer's /progress through `kubectl port-forward` on a free local port."""
    kubectl = [str(e2e.kubectl.binary), "--kubeconfig", str(e2e.kubectl.kubeconfig)]
    forward = subprocess.Popen(
        [*kubectl, "port-forward", "-n", ns, f"pod/{pod}", ":9464"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()
        found = re.search(r"127\.0\.0\.1:(\d+) -> 9464", line)
        assert found is not None, line + (forward.stderr.read() if forward.poll() else "")
        url = f"http://127.0.0.1:{found[1]}/progress"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.headers["X-Tuneop-Pod"] == pod
                return dict(json.loads(response.read()), pod=response.headers["X-Tuneop-Pod"])
        except OSError as err:
            forward.terminate()
            raise AssertionError(f"{err}: {forward.communicate(timeout=10)}") from None
    finally:
        if forward.poll() is None:
            forward.terminate()
            forward.wait(timeout=10)


def evict_and_read_exit(e2e: Env, ns: str, pod: str) -> tuple[int, float]:
    """Evict `pod` with a finalizer holding it; its container's exit code and the
    seconds from the eviction to the container's end. The hold is released after."""
    e2e.kubectl("patch", "pod", pod, "-n", ns, "--type=merge",
                "-p", json.dumps({"metadata": {"finalizers": [HOLD]}}))  # fmt: skip
    evicted = time.time()
    disruption.evict_pod(e2e.cluster.api, ns, pod)
    try:
        state = wait_for(lambda: terminated(e2e, ns, pod), 90, f"{pod} terminated")
    finally:
        release = '[{"op": "remove", "path": "/metadata/finalizers"}]'
        e2e.kubectl("patch", "pod", pod, "-n", ns, "--type=json", "-p", release, check=False)
    ended = dt.datetime.fromisoformat(state["finishedAt"].replace("Z", "+00:00")).timestamp()
    return int(state["exitCode"]), ended - evicted


def terminated(e2e: Env, ns: str, pod: str) -> dict[str, Any] | None:
    body = e2e.kubectl.json("get", "pod", pod, "-n", ns)
    statuses = (body.get("status") or {}).get("containerStatuses") or []
    return next((s["state"]["terminated"] for s in statuses if "terminated" in s["state"]), None)


def test_a_memory_limit_kills_the_trial_by_cgroup_and_the_search_completes(
    e2e: Env, real_node: KubeletNode
) -> None:
    ns = restricted_namespace(e2e, "real-oom")
    e2e.kubectl("create", "configmap", "ballast", "-n", ns, f"--from-file={BALLAST_SCRIPT}")
    e2e.submit_script(
        ns,
        script={"configMap": {"name": "ballast"}, "deterministic": True},
        resources={"limits": {"memory": "1536Mi"}},
        **on_real_node(real_node),
    )
    final = e2e.wait_phase(ns, "Succeeded", timeout=400)
    assert final["trialOOMs"] == 1 and final["failures"] == 0, final
    assert final["preemptions"] == 0, final
    [oom] = final["oomTrials"]
    results = json.loads((e2e.claim_dir(ns) / RESULTS_FILE).read_text())
    trials = {t["trialId"]: t for t in results["trials"]}
    assert (
        trials[oom]["status"] == "FAILED" and trials[oom]["hyperparameters"]["ballast_mb"] == 3072
    )
    assert sorted(t["status"] for t in trials.values()) == ["COMPLETED", "COMPLETED", "FAILED"]
    events = [e for e in e2e.kubectl.events(ns, "search") if e["reason"] == "TrialOutOfMemory"]
    assert len(events) == 1 and "1536Mi" in events[0]["message"], events
