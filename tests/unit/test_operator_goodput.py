"""GPU time accounting (status.goodput) through a scenario with known times: a pod
holds 2 GPUs, checkpoints, is evicted, and its replacement trains again."""

from __future__ import annotations

import datetime as dt

from tuneop.api import status as st
from tuneop.api.progress import ProgressView
from tuneop.decide.goodput import REFRESH_SECONDS, pod_gpu_seconds, trained_since_restore

from tests.unit.operator_world import T0, World

EVICTED = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}


def at(seconds: float) -> str:
    return st.rfc3339(T0 + dt.timedelta(seconds=seconds))


def running_since(w: World, seconds: float) -> None:
    for pod in w.pods.values():
        pod["status"] = {"phase": "Running", "startTime": at(seconds)}


def test_a_preemption_costs_the_work_since_the_checkpoint_plus_the_recovery():
    w = World(distribution={"workers": 1, "gpusPerWorker": 2})
    w.step()  # T0+2: pods created
    running_since(w, 3)
    w.step()  # T0+4
    w.step(6)  # T0+10
    w.progress(trial_id="0001", step=5, last_checkpoint_time=at(10), phase="Running")
    w.step(10)  # T0+20: last progress at 20, last checkpoint at 10
    pod = w.pods["j-worker-0"]
    pod["status"]["conditions"] = [EVICTED]
    w.vanish("j-worker-0")
    w.step(10)  # T0+30: preempted; the pod held 2 GPUs from 3 to 30
    goodput = w.status["goodput"]
    assert goodput["allocatedGpuSeconds"] == 2 * 27
    assert goodput["pending"]["trainer"]["since"] == at(10)
    w.step(2)  # T0+32: the replacement is created
    running_since(w, 35)
    w.step(3)  # T0+35
    w.progress(trial_id="0001", step=5, resumed_from_step=5, resumed_from_epoch=0)
    w.step(10)  # T0+45: restored, not trained yet
    assert "lostGpuSeconds" not in w.status["goodput"]
    w.progress(trial_id="0001", step=6, resumed_from_step=5, resumed_from_epoch=0)  # at 45
    d = w.step(5)  # T0+50: the first step after the restore, reported at 45
    goodput = w.status["goodput"]
    assert goodput["lostGpuSeconds"] == 2 * (45 - 10)  # redone 10..30, recovery 30..45
    assert goodput["recoveries"] == 1 and goodput["lastRecoverySeconds"] == 45 - 30
    assert d.recoveries == [("EvictionByEvictionAPI", 15.0)]
    assert goodput["allocatedGpuSeconds"] == 2 * 27 + 2 * (50 - 35)
    assert goodput["percent"] == round(100 * (1 - 70 / (54 + 30)), 1)
    assert "pending" not in goodput  # removed by the merge patch
    d = w.step(1)
    assert d.recoveries == [] and "goodput" not in d.status  # refreshed now and then only
    d = w.step(REFRESH_SECONDS)  # a pass of its own once the share is that old
    assert d.status["goodput"]["allocatedGpuSeconds"] == 2 * 27 + 2 * (51 + REFRESH_SECONDS - 35)


def test_pod_gpu_seconds_end_at_the_trainer_s_exit():
    pod = {
        "status": {
            "startTime": at(0),
            "containerStatuses": [{"state": {"terminated": {"finishedAt": at(30)}}}],
        }
    }
    assert pod_gpu_seconds(pod, 4, T0 + dt.timedelta(seconds=100)) == 120
    assert pod_gpu_seconds({"status": {}}, 4, T0) == 0  # never started: no GPU held
    assert pod_gpu_seconds(pod, 0, T0 + dt.timedelta(seconds=100)) == 0  # the oracle


def test_training_after_a_restore():
    def view(**v: object) -> ProgressView:
        return ProgressView({"phase": "Running", **v})

    assert not trained_since_restore(view(step=5, epoch=1, resumedFromStep=5, resumedFromEpoch=1))
    assert trained_since_restore(view(step=6, epoch=1, resumedFromStep=5, resumedFromEpoch=1))
    assert trained_since_restore(view(step=0, epoch=2, resumedFromStep=5, resumedFromEpoch=1))
    assert trained_since_restore(view(step=1))  # a fresh trial, nothing restored
    assert not trained_since_restore(ProgressView({"phase": "Starting", "step": 3}))
