"""The checkpoint volume records its TuningJob: another job's volume is refused (exit 2,
one line naming spec.checkpoint.adopt) unless adopted, and adopting rewrites the record.
No TensorFlow: the check runs before it is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from trainer_helpers import env, tiny_spec, write_spec
from tuneop_contract import (
    ENV_JOB_NAME,
    ENV_JOB_NAMESPACE,
    ENV_JOB_UID,
    EXIT_INVALID_SPEC,
    OWNER_FILE,
)
from tuneop_contract.spec import SpecError
from tuneop_trainer.checkpoint import ownership
from tuneop_trainer.spec import parse

OLD = {ENV_JOB_UID: "uid-old", ENV_JOB_NAMESPACE: "team", ENV_JOB_NAME: "search"}
NEW = {**OLD, ENV_JOB_UID: "uid-new"}


def spec(adopt: bool = False, **tuner: object):
    manifest = tiny_spec(**tuner)
    manifest["spec"].setdefault("checkpoint", {})["adopt"] = adopt
    return parse(manifest)


def record(root: Path) -> dict[str, object]:
    return json.loads((root / OWNER_FILE).read_text())


def test_the_first_start_records_the_job(tmp_path: Path) -> None:
    ownership.check(tmp_path, spec(), write=True, env=OLD)
    saved = record(tmp_path)
    assert (saved["uid"], saved["namespace"], saved["name"]) == ("uid-old", "team", "search")
    assert saved["specFingerprint"] == ownership.spec_fingerprint(spec())
    ownership.check(tmp_path, spec(), write=True, env=OLD)  # its own volume: accepted
    assert record(tmp_path)["uid"] == "uid-old"


def test_another_jobs_volume_is_refused_naming_the_field(tmp_path: Path) -> None:
    ownership.check(tmp_path, spec(), write=True, env=OLD)
    before = (tmp_path / OWNER_FILE).read_bytes()
    with pytest.raises(SpecError) as err:
        ownership.check(tmp_path, spec(), write=True, env=NEW)
    message = str(err.value)
    assert message.startswith("spec.checkpoint.adopt: ")
    assert "TuningJob team/search (uid uid-old, the same search spec)" in message
    assert "not of this job (uid uid-new)" in message
    assert (tmp_path / OWNER_FILE).read_bytes() == before  # a refusal changes nothing
    with pytest.raises(SpecError, match="a different search spec"):
        ownership.check(tmp_path, spec(seed=8), write=True, env=NEW)


def test_adopting_rewrites_the_record_to_the_new_job(tmp_path: Path) -> None:
    ownership.check(tmp_path, spec(), write=True, env=OLD)
    ownership.check(tmp_path, spec(adopt=True), write=True, env=NEW)
    saved = record(tmp_path)
    assert saved["uid"] == "uid-new"
    assert saved["adoptedFrom"] == ["uid-old"]
    # once adopted the volume is the new job's: no flag needed on its next start
    ownership.check(tmp_path, spec(), write=True, env=NEW)
    assert not list(tmp_path.glob(".owner.json.*"))  # atomic write left no temp file


def test_a_process_that_does_not_write_only_compares(tmp_path: Path) -> None:
    ownership.check(tmp_path, spec(), write=False, env=NEW)
    assert not (tmp_path / OWNER_FILE).exists()
    ownership.check(tmp_path, spec(), write=True, env=OLD)
    with pytest.raises(SpecError):
        ownership.check(tmp_path, spec(), write=False, env=NEW)
    ownership.check(tmp_path, spec(adopt=True), write=False, env=NEW)
    assert record(tmp_path)["uid"] == "uid-old"  # the writer rewrites, not a reader


def test_without_a_job_uid_nothing_is_checked(tmp_path: Path) -> None:
    ownership.check(tmp_path, spec(), write=True, env={})
    assert not (tmp_path / OWNER_FILE).exists()


def test_an_unreadable_record_is_refused_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / OWNER_FILE).write_text("{not json")
    with pytest.raises(SpecError, match="unreadable record"):
        ownership.check(tmp_path, spec(), write=True, env=NEW)
    assert (tmp_path / OWNER_FILE).read_text() == "{not json"


def test_adopt_must_be_a_boolean() -> None:
    manifest = tiny_spec()
    manifest["spec"]["checkpoint"] = {"adopt": "yes"}
    with pytest.raises(SpecError, match=r"^spec\.checkpoint\.adopt: "):
        parse(manifest)


def test_the_cli_refuses_with_one_line_and_exit_2(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    ownership.check(ckpt, spec(), write=True, env=OLD)
    path = write_spec(tmp_path, tiny_spec())
    proc = subprocess.run(
        [sys.executable, "-m", "tuneop_trainer", "run", "--spec", str(path), "--dir", str(ckpt)],
        capture_output=True,
        text=True,
        env={**env(), **NEW},
        timeout=120,
    )
    assert proc.returncode == EXIT_INVALID_SPEC, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: spec.checkpoint.adopt: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert record(ckpt)["uid"] == "uid-old"
