"""The progress format both sides read: round trips and tolerance of unknown keys; and
that the contract stays standard library only."""

import json
import sys
from pathlib import Path

import pytest
import tuneop_contract as c

from tests.unit.layers import MAX_FUNCTION_LINES, imported, long_functions, modules

CONTRACT = Path(__file__).resolve().parents[2] / "contract"


def test_the_contract_imports_only_the_standard_library():
    """Every image installs it: the operator's has no TensorFlow, the trainer's no kopf."""
    found = [
        f"{path.relative_to(CONTRACT)}:{line}: {name}"
        for module, path in modules(CONTRACT, CONTRACT / "tuneop_contract").items()
        for line, name in imported(module, path.read_text(), package=path.name == "__init__.py")
        if name.split(".")[0] not in {*sys.stdlib_module_names, "tuneop_contract"}
    ]
    assert found == []
    assert {"tuneop_contract.spec", "tuneop_contract.spec.job"} <= set(
        modules(CONTRACT, CONTRACT / "tuneop_contract")
    )


def test_no_function_of_the_contract_is_longer_than_a_screen():
    long = long_functions(list(modules(CONTRACT, CONTRACT / "tuneop_contract").values()), CONTRACT)
    assert long == [], f"split these into named steps of at most {MAX_FUNCTION_LINES} lines"


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


def test_final_summary_round_trips_compactly():
    summary = c.FinalSummary(
        trials_completed=6,
        trials_total=6,
        best_trial_id="0004",
        best_score=0.91,
        best_hyperparameters={"units": 32, "lr": 0.001},
    )
    text = summary.to_message()
    assert " " not in text and len(text.encode()) < c.FINAL_SUMMARY_MAX_BYTES
    assert c.parse_final_summary(text) == summary


def test_a_huge_final_summary_drops_its_hyperparameters_and_stays_under_the_limit():
    hps = {f"layer_{i}_units": "x" * 40 for i in range(200)}
    text = c.FinalSummary(6, 6, "0004", 0.9, hps).to_message()
    assert len(text.encode()) <= c.FINAL_SUMMARY_MAX_BYTES < c.TERMINATION_MESSAGE_LIMIT
    parsed = c.parse_final_summary(text)
    assert parsed == c.FinalSummary(6, 6, "0004", 0.9, None)


def test_termination_messages_that_are_not_summaries_parse_as_none():
    not_ours = ["error: spec.tuner.algorithm: bad", "{not json", "[1]", '{"trialsCompleted": 3}']
    for text in (None, "", *not_ours, '{"tuneopFinal": 1, "trialsCompleted": "3"}'):
        assert c.parse_final_summary(text) is None


def test_a_summary_with_bad_field_types_keeps_what_is_valid():
    record = {c.FINAL_SUMMARY_KEY: 1, "trialsCompleted": 2, "trialsTotal": -1}
    record.update(bestScore="high", bestTrialId=7, bestHyperparameters=[1])
    text = json.dumps(record)
    assert c.parse_final_summary(text) == c.FinalSummary(2, None, "7", None, None)


def test_write_termination_message_only_where_the_kubelet_created_the_file(tmp_path):
    path = tmp_path / "termination-log"
    assert not c.write_termination_message("x", str(path))
    path.touch()
    assert c.write_termination_message("x", str(path)) and path.read_text() == "x"


def test_the_progress_configmap_holds_the_status_form_as_json():
    progress = c.Progress(trial_id="0003", step=4, best_hyperparameters={"u": 8})
    patch = c.progress_configmap_patch(progress)
    assert list(patch) == ["data"] and list(patch["data"]) == [c.PROGRESS_KEY]
    assert c.progress_from_configmap(patch) == progress.to_status()
    assert c.Progress.from_dict(c.progress_from_configmap(patch)) == progress
    for empty in (None, {}, {"data": {}}, {"data": None}, {"data": {c.PROGRESS_KEY: ""}}):
        assert c.progress_from_configmap(empty) is None
    with pytest.raises(ValueError):
        c.progress_from_configmap({"data": {c.PROGRESS_KEY: "{no"}})


def test_failed_trials_round_trip_and_tolerate_junk():
    text = c.format_failed_trials({"01": c.FAILED_REASON_OOM, "7": "x"})
    assert text == "01:OOMKilled,7:x"
    assert c.parse_failed_trials(text) == {"01": "OOMKilled", "7": "x"}
    assert c.parse_failed_trials(None) == {} == c.parse_failed_trials("")
    assert c.parse_failed_trials(" 3 , ,3:later, 4: ") == {"3": "failed", "4": "failed"}


def test_rank_trials_keeps_the_best_completed_scored_trials_best_first():
    trials = [
        {"trialId": "0", "status": "COMPLETED", "score": 0.5, "hyperparameters": {"u": 1}},
        {"trialId": "1", "status": "RUNNING", "score": 0.99, "hyperparameters": {}},
        {"trialId": "2", "status": "COMPLETED", "score": None, "hyperparameters": {}},
        {"trialId": "3", "status": "COMPLETED", "score": float("nan"), "hyperparameters": {}},
        {"trialId": "4", "status": "COMPLETED", "score": 0.9, "hyperparameters": {"u": 4}},
        {"trialId": "5", "status": "COMPLETED", "score": 0.7, "hyperparameters": {"u": 5}},
    ]
    assert [t["trialId"] for t in c.rank_trials(trials, "max")] == ["4", "5", "0"]
    assert [t["trialId"] for t in c.rank_trials(trials, "min", limit=2)] == ["0", "5"]
    assert c.rank_trials(trials, "max")[0] == {
        "trialId": "4", "score": 0.9, "hyperparameters": {"u": 4}
    }  # fmt: skip
    many = [{"trialId": str(i), "score": float(i)} for i in range(20)]
    assert len(c.rank_trials(many, "max")) == c.TOP_TRIALS


def test_a_summary_too_long_for_its_top_trials_drops_them_before_the_best_hyperparameters():
    top = [{"trialId": str(i), "score": 0.5, "hyperparameters": {"p": "x" * 700}} for i in range(5)]
    summary = c.FinalSummary(6, 6, "0", 0.5, {"units": 8}, top)
    text = summary.to_message()
    assert len(text.encode()) <= c.FINAL_SUMMARY_MAX_BYTES
    assert json.loads(text)["topTrialsOmitted"] is True
    assert c.parse_final_summary(text) == c.FinalSummary(6, 6, "0", 0.5, {"units": 8}, None)
    small = c.FinalSummary(6, 6, "0", 0.5, {"units": 8}, top[:1])
    assert c.parse_final_summary(small.to_message()) == small
