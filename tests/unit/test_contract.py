"""The progress format both sides read: round trips and tolerance of unknown keys."""

import json

import tuneop_contract as c


def test_progress_round_trips_through_file_and_status_forms(tmp_path):
    progress = c.Progress(
        phase=c.PHASE_RUNNING,
        trial_id="0003",
        trials_completed=3,
        trials_total=10,
        epoch=2,
        step=17,
        resumed_from_step=12,
        best_score=0.75,
        best_hyperparameters={"units": 32},
    )
    c.write_progress(tmp_path, progress)
    assert c.read_progress(tmp_path) == progress
    status = progress.to_status()
    assert status["trialsCompleted"] == 3
    assert status["resumedFromStep"] == 12
    assert c.Progress.from_dict(status) == progress


def test_unknown_keys_are_ignored_and_missing_file_is_none(tmp_path):
    assert c.read_progress(tmp_path) is None
    data = json.loads(c.Progress(step=5).to_json())
    data["fromANewerTrainer"] = True
    assert c.Progress.from_dict(data).step == 5


def test_write_atomic_leaves_no_temp_files(tmp_path):
    target = tmp_path / "sub" / "f.json"
    c.write_atomic(target, b"one")
    c.write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]


def test_exit_codes_are_distinct():
    codes = [c.EXIT_COMPLETED, c.EXIT_FAILED, c.EXIT_INVALID_SPEC, c.EXIT_PREEMPTED]
    assert len(set(codes)) == len(codes)
    assert set(c.EXIT_CODE_MEANING) == set(codes)
