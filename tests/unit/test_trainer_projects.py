"""Where each tuner a script constructs keeps its project (engine/projects.py): several
tuners, overwrite=True, and a resumed process reaching the same constructions again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tuneop_contract import TUNER_DIR
from tuneop_contract.spec import SpecError
from tuneop_trainer.engine.projects import RECORD, Projects


def _projects(root: Path, write: bool = True, parallel: bool = False) -> Projects:
    return Projects(root, RECORD, write=write, parallel=parallel)


def _keys(projects: Projects, *calls: tuple[str, bool]) -> list[str]:
    return [projects.place(name, overwrite, "s.py").key for name, overwrite in calls]


GUIDE = [("untitled_project", True)] * 3  # failed_trials: three tuners, one project


def test_each_construction_has_a_directory_of_its_own(tmp_path: Path) -> None:
    keys = _keys(
        _projects(tmp_path),
        ("a", False),
        ("a", False),  # reloads a copy of a's search
        ("b", True),
        ("a", True),
        ("a", False),
        ("a", True),
    )
    assert keys == ["a", "a@1", "b", "a@2", "a@3", "a@4"]


def test_a_reused_project_is_a_copy_the_earlier_tuner_never_sees_change(
    tmp_path: Path,
) -> None:
    projects = _projects(tmp_path)
    first = projects.place("p", False, "s.py")
    oracle = projects.project_dir(first) / "oracle.json"
    oracle.parent.mkdir(parents=True)
    oracle.write_text("first's search")
    second = projects.place("p", False, "s.py")
    copied = projects.project_dir(second) / "oracle.json"
    assert copied.read_text() == "first's search"
    copied.write_text("second's search")
    assert oracle.read_text() == "first's search"


def test_generations_never_collide_with_a_project_named_like_one(tmp_path: Path) -> None:
    keys = _keys(_projects(tmp_path), ("p@1", False), ("p", True), ("p", True))
    assert keys == ["p@1", "p", "p@2"]


def test_with_parallel_trials_a_reused_project_is_shared_and_nothing_wiped(
    tmp_path: Path,
) -> None:
    projects = _projects(tmp_path, parallel=True)
    first = projects.place("p", True, "s.py")
    kept = projects.project_dir(first) / "tuner1.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("{}")
    assert projects.place("p", False, "s.py").key == "p"
    assert projects.place("p", True, "s.py").key == "p@1"
    assert kept.exists()


def test_later_generations_keep_the_project_name_in_a_directory_of_their_own(
    tmp_path: Path,
) -> None:
    projects = _projects(tmp_path)
    placements = [projects.place("p", True, "s.py"), projects.place("p", True, "s.py")]
    assert [(p.key, p.directory) for p in placements] == [("p", ""), ("p@1", "@1")]
    assert projects.project_dir(placements[1]) == tmp_path / TUNER_DIR / "@1" / "p"


def test_a_resumed_process_reaches_the_same_projects_and_wipes_none(tmp_path: Path) -> None:
    first = _projects(tmp_path)
    assert _keys(first, *GUIDE[:2]) == ["untitled_project", "untitled_project@1"]
    marker = tmp_path / TUNER_DIR / "@1" / "untitled_project" / "trial_0" / "trial.json"
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    # killed during the second tuner; the next process reaches both again, then the third
    resumed = _projects(tmp_path)
    placements = [resumed.place(name, overwrite, "s.py") for name, overwrite in GUIDE]
    assert [p.reached for p in placements] == [True, True, False]
    assert [(p.key, p.directory) for p in placements] == [
        ("untitled_project", ""),
        ("untitled_project@1", "@1"),
        ("untitled_project@2", "@2"),
    ]
    assert marker.exists()  # resumed, not wiped
    record = json.loads((tmp_path / TUNER_DIR / RECORD).read_text())
    assert [t["key"] for t in record["tuners"]] == [p.key for p in placements]


def test_overwrite_wipes_what_was_there_before_the_construction_was_reached(
    tmp_path: Path,
) -> None:
    stale = tmp_path / TUNER_DIR / "p" / "oracle.json"
    stale.parent.mkdir(parents=True)
    (tmp_path / TUNER_DIR / RECORD).write_text(json.dumps({"tuners": []}))
    stale.write_text("{}")
    assert _keys(_projects(tmp_path), ("p", True)) == ["p"]
    assert not stale.exists()


def test_without_overwrite_an_existing_project_is_reloaded(tmp_path: Path) -> None:
    (tmp_path / TUNER_DIR).mkdir()
    (tmp_path / TUNER_DIR / RECORD).write_text(json.dumps({"tuners": []}))
    kept = tmp_path / TUNER_DIR / "p" / "oracle.json"
    kept.parent.mkdir()
    kept.write_text("{}")
    _keys(_projects(tmp_path), ("p", False))
    assert kept.exists()


def test_a_volume_from_before_the_record_never_wipes(tmp_path: Path) -> None:
    kept = tmp_path / TUNER_DIR / "p" / "oracle.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("{}")
    placement = _projects(tmp_path).place("p", True, "s.py")
    assert placement.reached and kept.exists()
    assert (placement.key, placement.directory) == ("", "")  # its trials/<id>/ as before


def test_a_record_torn_by_a_kill_does_not_make_a_volume_look_old(tmp_path: Path) -> None:
    (tmp_path / TUNER_DIR).mkdir()
    (tmp_path / TUNER_DIR / f".{RECORD}.x1y2.tmp").write_text("{")
    assert not _projects(tmp_path).place("p", True, "s.py").reached


def test_readers_record_nothing(tmp_path: Path) -> None:
    _keys(_projects(tmp_path, write=False), ("p", True))
    assert not (tmp_path / TUNER_DIR / RECORD).exists()


def test_tuners_constructed_in_another_order_are_refused(tmp_path: Path) -> None:
    _keys(_projects(tmp_path), ("a", False), ("b", False))
    resumed = _projects(tmp_path)
    resumed.place("a", False, "s.py")
    with pytest.raises(SpecError, match=r"s.py: tuner 1 is project 'c', but it was 'b'"):
        resumed.place("c", False, "s.py")


def test_an_unreadable_record_is_refused(tmp_path: Path) -> None:
    (tmp_path / TUNER_DIR).mkdir()
    (tmp_path / TUNER_DIR / RECORD).write_text("{not json")
    with pytest.raises(SpecError, match="cannot read"):
        _projects(tmp_path)


def test_a_worker_follows_the_chiefs_record_whatever_it_saw_at_start(tmp_path: Path) -> None:
    """A worker of a multi-worker group loads the record before the chief has started
    the search, and the chief's view must win: the worker's keras-tuner files appear
    only after the chief placed the construction, and the worker places it from the
    chief's record (the trainer reloads it after a barrier)."""
    worker = _projects(tmp_path, write=False)
    chief = _projects(tmp_path)
    first = chief.place("p", True, "s.py")
    (chief.project_dir(first) / "oracle.json").parent.mkdir(parents=True)
    second = chief.place("p", True, "s.py")
    assert [first.key, second.key] == ["p", "p@1"]
    worker.reload()
    assert _keys(worker, ("p", True), ("p", True)) == ["p", "p@1"]
    assert [worker.project_dir(p) for p in worker.placed] == [
        chief.project_dir(p) for p in chief.placed
    ]
    # a worker starting after the chief began sees the record, not a volume to adopt
    late = _projects(tmp_path, write=False)
    assert _keys(late, ("p", True)) == ["p"]
