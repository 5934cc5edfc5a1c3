"""Script mode end to end: the user's own keras-tuner script (manifests/samples/
emg_search.py) in a ConfigMap, a TuningJob like manifests/samples/tuningjob-script.yaml,
the real operator and real trainer processes on the local cluster.

The eviction test needs a trainer that runs scripts; the ConfigMap tests only need the
operator (they end before a trainer would matter)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tuneop_contract as contract
from tuneop.api import names

from tests.e2e.harness import (
    ROOT,
    SCRIPT_SEARCH,
    Env,
    fetch_results,
    required_condition,
    wait_for,
    wait_mid_epoch,
)
from tests.localcluster import disruption

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

# emg_search.py: 384 samples, validation_split 0.25, batch_size 16; 3 trials of 2 epochs
STEPS_PER_EPOCH = 384 * 3 // 4 // 16
INTERVAL_STEPS = SCRIPT_SEARCH["checkpoint"]["intervalSteps"]
"""Small (3), so the trial running at the eviction has a checkpoint at a step > 0."""


def test_a_script_evicted_mid_trial_resumes_at_its_step_and_completes(
    e2e: Env, tmp_path: Path
) -> None:
    ns = e2e.namespace("script")
    e2e.create_script_configmap(ns)
    e2e.submit_script(ns)
    e2e.wait_phase(ns, "Running", timeout=120)
    pod = "search-worker-0"
    first = e2e.kubectl.json("get", "pod", pod, "-n", ns)
    mounts = {m["name"]: m for m in first["spec"]["containers"][0]["volumeMounts"]}
    assert mounts[names.SCRIPT_VOLUME]["readOnly"] is True
    try:
        # a trial after the first, mid-epoch, past its first periodic checkpoint
        wait_mid_epoch(e2e.kubectl, ns, "search", STEPS_PER_EPOCH, min_step=INTERVAL_STEPS + 1)
    except (TimeoutError, AssertionError) as err:
        raise AssertionError(f"{err}\n{e2e.diagnose(ns)}") from None
    uid = first["metadata"]["uid"]
    disruption.evict_pod(e2e.cluster.api, ns, pod)
    status = e2e.wait_status(ns, lambda s: s.get("preemptions", 0) >= 1, 120, "the preemption")
    assert status["preemptions"] == 1 and status["failures"] == 0
    restored = e2e.wait_status(ns, lambda s: s.get("restores", 0) >= 1, 240, "the restore")
    # past the trial's start: mid-epoch, or (an eviction that reached the trainer only in
    # the epoch's last steps, on a loaded machine) at the next epoch's start
    resumed = restored["progress"]
    assert (resumed["resumedFromEpoch"], resumed["resumedFromStep"]) > (0, 0), resumed
    new_pod = e2e.cluster.pod(ns, pod)
    assert new_pod is not None and new_pod.metadata.uid != uid
    assert new_pod.metadata.labels["tuneop.io/attempt"] == "1"
    final = e2e.wait_phase(ns, "Succeeded", timeout=400)
    assert final["preemptions"] == 1 and final["failures"] == 0 and final["restores"] == 1
    assert final["trialsCompleted"] == final["trialsTotal"] == 3 and final["trials"] == "3/3"
    assert final["bestTrial"]["id"] and isinstance(final["bestTrial"]["score"], float)
    events = e2e.kubectl.events(ns, "search")
    reasons = [e["reason"] for e in events]
    assert reasons == ["Created", "Preempted", "Created", "Restored", "Completed"], reasons
    assert "EvictionByEvictionAPI" in events[1]["message"]
    where = "at step" if resumed["resumedFromStep"] > 0 else "at an epoch boundary"
    assert where in events[3]["message"], events[3]
    # the user's script itself ran to its end (its last line prints this)
    logs = e2e.kubectl("logs", "-n", ns, pod, check=False).stdout
    assert "best hyperparameters:" in logs, logs[-3000:]
    # what it saved to a relative path is on the claim, in its working directory there
    saved = e2e.claim_dir(ns) / contract.OUTPUTS_DIR / "best_model.keras"
    assert zipfile.is_zipfile(saved), sorted(p.name for p in saved.parent.iterdir())
    fetched = fetch_results(e2e, ns, "search", tmp_path)
    assert fetched.returncode == 0, fetched.stderr
    copy = tmp_path / contract.OUTPUTS_DIR / "best_model.keras"
    assert copy.read_bytes() == saved.read_bytes()
    # its TensorBoard callback's logs, served from the claim: every trial, each epoch once
    # (the evicted trial's too), and the HParams dashboard lists every trial
    runs = [f"logs/{t['id']}/execution0/{s}" for t in final["topTrials"] for s in RUNS]
    with tensorboard(e2e, ns) as url:
        epochs = wait_for(lambda: epoch_values(url, runs), 90, "TensorBoard serving the runs")
        assert all([step for step, _ in v] == [0, 1] for v in epochs.values()), epochs
        groups = session_groups(url)
    for trial in final["topTrials"]:
        hparams, accuracy = groups[trial["id"]]
        assert hparams == trial["hyperparameters"]
        served = [value for _, value in epochs[f"logs/{trial['id']}/execution0/validation"]]
        assert accuracy == served[-1] and trial["score"] in served  # the best epoch's


RUNS = ("train", "validation")


@contextlib.contextmanager
def tensorboard(e2e: Env, ns: str) -> Iterator[str]:
    """The URL of the TensorBoard hack/tensorboard.sh starts over the job's claim (its
    pod IP: the local cluster has no port-forward); the pod is deleted after."""
    kubectl = f"{e2e.kubectl.binary} --kubeconfig {e2e.kubectl.kubeconfig}"
    started = subprocess.run(
        [str(ROOT / "hack" / "tensorboard.sh"), "search", ns],
        env={**os.environ, "KUBECTL": kubectl, "NO_FORWARD": "1", "TIMEOUT": "120"},
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    found = re.fullmatch(r"pod (\S+) ip (\S+) port 6006\n", started.stdout)
    assert found is not None, started.stdout
    try:
        yield f"http://{found[2]}:6006/data/plugin"
    finally:
        e2e.kubectl("delete", "pod", found[1], "-n", ns, "--wait=false", check=False)


def _get(url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def epoch_values(url: str, runs: list[str]) -> dict[str, list[tuple[int, float]]] | None:
    """(step, value) of `epoch_accuracy` in each of `runs`; None until all are loaded."""
    try:
        tags = _get(f"{url}/scalars/tags")
    except OSError:
        return None  # not serving yet
    if not set(runs) <= set(tags):
        return None
    values = {}
    for run in runs:
        query = urllib.parse.urlencode({"run": run, "tag": "epoch_accuracy"})
        values[run] = [(step, value) for _, step, value in _get(f"{url}/scalars/scalars?{query}")]
    return values


def session_groups(url: str) -> dict[str, tuple[dict[str, Any], float]]:
    """The HParams dashboard's trials: name -> (hyperparameters, validation accuracy)."""
    statuses = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_RUNNING"]
    request = {"experimentName": "", "startIndex": 0, "sliceSize": 100, "allowedStatuses": statuses}
    groups = {}
    for group in _get(f"{url}/hparams/session_groups", request)["sessionGroups"]:
        metrics = {
            (m["name"].get("group"), m["name"]["tag"]): m["value"] for m in group["metricValues"]
        }
        groups[group["name"]] = (group["hparams"], metrics[("validation", "epoch_accuracy")])
    return groups


def test_a_job_applied_before_its_configmap_waits_without_pods_then_starts(e2e: Env):
    ns = e2e.namespace("script-wait")
    e2e.submit_script(ns)
    status = e2e.wait_status(
        ns, lambda s: "waiting for ConfigMap 'emg-search'" in s.get("message", ""), 60,
        "the wait for the ConfigMap",
    )  # fmt: skip
    assert status["phase"] == "Pending" and status["preemptions"] == 0
    running = required_condition(status, "Running")
    assert running["status"] == "False" and running["reason"] == "ScriptConfigMapMissing"
    events = e2e.kubectl.events(ns, "search")
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "ScriptConfigMapMissing")]
    assert "spec.script.configMap.name" in events[0]["message"]
    assert e2e.kubectl.pods(ns, "search") == []  # never a pod stuck in ContainerCreating
    e2e.create_script_configmap(ns)
    wait_for(lambda: e2e.kubectl.pods(ns, "search"), 60, "the trainer pod")
    assert e2e.reasons(ns)[:2] == ["ScriptConfigMapMissing", "Created"]
    e2e.kubectl("delete", "tj", "search", "-n", ns, "--timeout=60s")


def test_a_configmap_without_the_named_key_fails_the_job_naming_the_key(e2e: Env):
    ns = e2e.namespace("script-key")
    e2e.create_script_configmap(ns)
    e2e.submit_script(ns, script={"configMap": {"name": "emg-search", "key": "search.py"}})
    status = e2e.wait_phase(ns, "Failed", timeout=60)
    failed = required_condition(status, "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "spec.script.configMap.key" in failed["message"]
    assert "(it has: emg_search.py)" in failed["message"]
    assert e2e.reasons(ns) == ["InvalidSpec"] and e2e.kubectl.pods(ns, "search") == []
