"""MultiWorkerMirroredStrategy: two trainer processes, TF_CONFIG on loopback, one shared
checkpoint directory (as two pods on one claim). Both run the same trials in lockstep;
only the chief (index 0) writes; a SIGKILL of both mid-trial resumes from the chief's
checkpoint."""

from __future__ import annotations

import ast
import contextlib
import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from multiworker_helpers import free_ports, kill_group_when, start_group, wait_all, wait_progress
from trainer_helpers import (
    SCRIPTS,
    comparable,
    env,
    fit_weights,
    results,
    spec_fit,
    tiny_spec,
    trial_fit,
    write_records,
    write_spec,
)
from tuneop_contract import (
    ENV_TF_CONFIG,
    EXIT_COMPLETED,
    EXIT_PREEMPTED,
    TUNER_DIR,
    read_progress,
)

from tests.checkpoints import committed
from tests.forkserver import TrainerProcess, launch

pytestmark = pytest.mark.slow

SPEC = {"algorithm": "RandomSearch", "maxTrials": 2, "maxEpochs": 2}


def _best_line(log: Path) -> dict[str, Any]:
    """The 'search completed; best: {...}' line every worker logs (its own view)."""
    match = re.search(r"search completed; best: (\{.*\})", log.read_text())
    assert match, log.read_text()[-3000:]
    best: dict[str, Any] = ast.literal_eval(match.group(1))
    best.pop("model", None)  # only the chief exported the model file
    return best


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two workers, never interrupted."""
    tmp = tmp_path_factory.mktemp("mw-reference")
    spec = write_spec(tmp, tiny_spec(**SPEC))
    ckpt, logs = tmp / "ckpt", [tmp / "log0", tmp / "log1"]
    codes = wait_all(start_group(spec, ckpt, logs))
    assert codes == [EXIT_COMPLETED] * 2, "\n".join(p.read_text()[-3000:] for p in logs)
    return {"results": results(ckpt), "logs": logs, "ckpt": ckpt}


def test_two_workers_complete_and_agree(reference: dict[str, Any]) -> None:
    res, logs = reference["results"], reference["logs"]
    assert [t["status"] for t in res["trials"]] == ["COMPLETED", "COMPLETED"]
    assert all(t["score"] is not None for t in res["trials"])
    for log in logs:
        text = log.read_text()
        assert "strategy: MultiWorkerMirroredStrategy, 2 replica(s)" in text
        assert "PerReplica" not in text
    # Same trials, same cross-worker metrics, same best weights on both workers.
    epochs = [re.findall(r"trial \S+ fit \d+ epoch .*", log.read_text()) for log in logs]
    assert epochs[0] == epochs[1] and len(epochs[0]) == 4
    assert _best_line(logs[0]) == _best_line(logs[1])
    assert _best_line(logs[0])["weightsSha256"] == res["best"]["weightsSha256"]
    assert res["best"]["model"] == "best_model.keras"
    assert (reference["ckpt"] / "best_model.keras").is_file()
    progress = read_progress(reference["ckpt"])
    assert progress is not None and progress.phase == "Completed"
    assert progress.trials_completed == progress.trials_total == 2


def test_group_sigkilled_mid_trial_resumes_from_checkpoint(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    spec = write_spec(tmp_path, tiny_spec(**SPEC))
    ckpt, logs = tmp_path / "ckpt", [tmp_path / "log0", tmp_path / "log1"]
    last = reference["results"]["trials"][-1]["trialId"]
    # once the chief has committed a checkpoint inside the second epoch
    kill_group_when(
        spec,
        ckpt,
        logs,
        lambda p: (
            p.trial_id == last
            and p.epoch == 1
            and p.step >= 4
            and committed(ckpt / spec_fit(last), at=(1, 1))
        ),
    )
    codes = wait_all(start_group(spec, ckpt, logs))
    assert codes == [EXIT_COMPLETED] * 2, "\n".join(p.read_text()[-3000:] for p in logs)
    for log in logs:  # both workers restored the chief's mid-epoch checkpoint
        restored = re.findall(r"restored ckpt-\d+ at epoch (\d+) step (\d+)", log.read_text())
        assert restored and int(restored[-1][0]) == 1 and int(restored[-1][1]) > 0
    got = results(ckpt)
    # Weights, optimizer and the validation objective resume exactly.
    assert comparable(got) == comparable(reference["results"])
    assert got["best"]["weightsSha256"] == reference["results"]["best"]["weightsSha256"]
    assert _best_line(logs[0]) == _best_line(logs[1])
    progress = read_progress(ckpt)
    assert progress is not None and progress.phase == "Completed" and progress.restores >= 1


@contextlib.contextmanager
def group_in_first_trial(
    tmp_path: Path, reference: dict[str, Any]
) -> Iterator[tuple[Path, Path, list[Path], list[TrainerProcess]]]:
    """(spec, checkpoint dir, logs, workers) of a group a few steps into the reference's
    first trial; whatever is still running afterwards is killed."""
    spec = write_spec(tmp_path, tiny_spec(**SPEC))
    ckpt, logs = tmp_path / "ckpt", [tmp_path / "log0", tmp_path / "log1"]
    first = reference["results"]["trials"][0]["trialId"]
    procs = start_group(spec, ckpt, logs)
    try:
        wait_progress(procs, ckpt, lambda p: p.trial_id == first and p.step >= 3)
        yield spec, ckpt, logs, procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def resume_as_the_reference(
    spec: Path, ckpt: Path, logs: list[Path], reference: dict[str, Any]
) -> None:
    """A new group on `ckpt` completes the search as the uninterrupted one did."""
    codes = wait_all(start_group(spec, ckpt, logs))
    assert codes == [EXIT_COMPLETED] * 2, "\n".join(p.read_text()[-3000:] for p in logs)
    got = results(ckpt)
    assert comparable(got) == comparable(reference["results"])
    assert got["best"]["weightsSha256"] == reference["results"]["best"]["weightsSha256"]


def test_losing_one_worker_is_a_preemption_not_a_failed_trial(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    """The non-chief is SIGKILLed mid-trial: the chief's next collective fails; it must
    exit 75 (resume me) without recording the trial as FAILED in the shared oracle."""
    first = reference["results"]["trials"][0]["trialId"]
    with group_in_first_trial(tmp_path, reference) as (spec, ckpt, logs, procs):
        procs[1].send_signal(signal.SIGKILL)
        assert procs[1].wait(timeout=30) == -signal.SIGKILL
        assert procs[0].wait(timeout=120) == EXIT_PREEMPTED, logs[0].read_text()[-3000:]
    assert "lost another worker" in logs[0].read_text()
    trial = json.loads((ckpt / TUNER_DIR / "search" / f"trial_{first}" / "trial.json").read_text())
    assert trial["status"] == "RUNNING"
    resume_as_the_reference(spec, ckpt, logs, reference)


def test_a_group_sigtermed_mid_trial_checkpoints_its_step_and_resumes_exactly(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    """Both pods of the group are deleted (SIGTERM each): the workers finish their step,
    the chief checkpoints it, both exit 75 - TensorFlow's own SIGTERM handler, installed
    with the strategy, must not swallow the signal - and the group resumes exactly."""
    with group_in_first_trial(tmp_path, reference) as (spec, ckpt, logs, procs):
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=60) for proc in procs]
    assert codes == [EXIT_PREEMPTED] * 2, "\n".join(p.read_text()[-3000:] for p in logs)
    chief = logs[0].read_text()
    assert "SIGTERM received: finishing the current step" in chief
    # mid-epoch: that step is checkpointed (at an epoch's end the epoch-end one stands)
    saved = re.search(r"preempted: .* checkpointed at epoch (\d+) step (\d+)", chief)
    assert saved is None or int(saved.group(2)) > 0, chief[-3000:]
    resume_as_the_reference(spec, ckpt, logs, reference)


def test_a_worker_waiting_for_its_unscheduled_peer_exits_75_on_sigterm(tmp_path: Path) -> None:
    """A group's pod whose peer is not scheduled (no IP, so its name does not resolve)
    waits for that address; its group is replaced (e.g. by a smaller shape): SIGTERM
    ends the wait with exit 75 at once instead of holding its GPUs until SIGKILL."""
    spec = write_spec(tmp_path, tiny_spec(**SPEC))
    ckpt, log = tmp_path / "ckpt", tmp_path / "log0"
    (port,) = free_ports(1)
    peers = [f"127.0.0.1:{port}", "search-worker-1.search-workers.unscheduled.invalid:2222"]
    e = env(devices=1)
    e[ENV_TF_CONFIG] = json.dumps(
        {"cluster": {"worker": peers}, "task": {"type": "worker", "index": 0}}
    )
    cmd = ["-m", "tuneop_trainer", "run", "--dir", str(ckpt), "--spec", str(spec)]
    proc = launch(cmd, e, log, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while "waiting for worker address" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == EXIT_PREEMPTED, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "SIGTERM received" in log.read_text()


def test_script_mode_group_sigkilled_mid_trial_resumes_exactly(tmp_path: Path) -> None:
    """exec under MultiWorkerMirroredStrategy: the script's fits run in lockstep on both
    workers, only the chief checkpoints, and a group SIGKILLed mid-epoch resumes from
    the chief's checkpoint with the same results as an uninterrupted group."""
    script = SCRIPTS / "features_search.py"
    spec = write_spec(tmp_path, {"checkpoint": {"intervalSteps": 3, "intervalSeconds": 0}})
    ref, ref_logs = tmp_path / "ref" / "ckpt", [tmp_path / "ref0", tmp_path / "ref1"]
    ref.parent.mkdir()
    codes = wait_all(start_group(spec, ref, ref_logs, script))
    assert codes == [EXIT_COMPLETED] * 2, "\n".join(p.read_text()[-3000:] for p in ref_logs)
    assert "MultiWorkerMirroredStrategy, 2 replica(s)" in ref_logs[1].read_text()

    ckpt, logs = tmp_path / "ckpt", [tmp_path / "log0", tmp_path / "log1"]
    kill_group_when(
        spec,
        ckpt,
        logs,
        lambda p: (
            p.trial_id == "1" and p.epoch >= 1 and p.step >= 3 and committed(ckpt / trial_fit("1"))
        ),
        script,
    )
    codes = wait_all(start_group(spec, ckpt, logs, script))
    assert codes == [EXIT_COMPLETED] * 2, "\n".join(p.read_text()[-3000:] for p in logs)
    for log in logs:
        assert "trial 1 fit 0: restored" in log.read_text()
    assert comparable(results(ckpt)) == comparable(results(ref))


def test_tfrecord_script_group_killed_at_two_points_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tf.data pipeline over TFRecord files, reshuffled each iteration
    (scripts/tfrecord_search.py): every worker iterates it and keeps its part of each
    global batch; the group SIGKILLed in trial 0 and again in trial 1 (which replays
    trial 0's iterations on both workers) ends as an uninterrupted group."""
    monkeypatch.delenv("TFRECORD_MODE", raising=False)
    write_records(tmp_path / "records")
    script = SCRIPTS / "tfrecord_search.py"
    spec = write_spec(tmp_path, {"checkpoint": {"intervalSteps": 3, "intervalSeconds": 0}})
    ref, ref_logs = tmp_path / "ref", [tmp_path / "ref0", tmp_path / "ref1"]
    codes = wait_all(start_group(spec, ref, ref_logs, script))
    assert codes == [EXIT_COMPLETED] * 2, "\n".join(p.read_text()[-3000:] for p in ref_logs)

    ckpt, logs = tmp_path / "ckpt", [tmp_path / "log0", tmp_path / "log1"]
    for trial, epoch in (("0", 1), ("1", 1)):
        kill_group_when(
            spec,
            ckpt,
            logs,
            lambda p, t=trial, e=epoch: (
                p.trial_id == t and p.epoch >= e and p.step >= 3 and committed(ckpt / trial_fit(t))
            ),
            script,
        )
    codes = wait_all(start_group(spec, ckpt, logs, script))
    assert codes == [EXIT_COMPLETED] * 2, "\n".join(p.read_text()[-3000:] for p in logs)
    for log in logs:
        text = log.read_text()
        assert "trial 0 fit 0: restored" in text and "trial 1 fit 0: restored" in text
        assert "iteration(s) of an input (_PrefetchDataset)" in text
    assert comparable(results(ckpt)) == comparable(results(ref))
    for trial in ("0", "1"):
        fit = trial_fit(trial)
        assert fit_weights(ckpt, fit) == fit_weights(ref, fit)
