"""With parallel trials each reporter (the oracle, each trial group) has its own record:
its own file in the checkpoint directory and its own key of the progress ConfigMap,
`tuneop_contract.progress_key(tuner id)`, so every file and key has one writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tuneop_contract as contract
from tuneop_contract import Progress
from tuneop_trainer.parallel import roles
from tuneop_trainer.report import progress as progress_mod
from tuneop_trainer.report.progress import Reporter, _ProgressPatcher


def test_each_tuner_id_writes_its_own_record(tmp_path: Path) -> None:
    group = Reporter(tmp_path, tuner_id="tuner1")
    oracle = Reporter(tmp_path, tuner_id=contract.ORACLE_TUNER_ID)
    group.update(force=True, trial_id="3", step=7, restores=2)
    oracle.update(force=True, trials_completed=4, trials_total=6)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "progress.chief.json",
        "progress.tuner1.json",
    ]
    again = Reporter(tmp_path, tuner_id="tuner1").previous()
    assert again is not None and (again.trial_id, again.step, again.restores) == ("3", 7, 2)
    assert Reporter(tmp_path).previous() is None  # the sequential record is not theirs


def test_the_configmap_patch_uses_the_tuner_ids_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[dict[str, Any]] = []

    class Response:
        def __enter__(self) -> Response:
            return self

        def __exit__(self, *_: Any) -> None:
            pass

        def read(self) -> bytes:
            return b"{}"

    def urlopen(request: Any, **_: Any) -> Response:
        sent.append(json.loads(request.data))
        return Response()

    monkeypatch.setattr(progress_mod.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(progress_mod.ssl, "create_default_context", lambda **_: None)
    token = tmp_path / "token"
    token.write_text("t")
    patcher = _ProgressPatcher("https://127.0.0.1:1/x", token, tmp_path / "ca", "tuner1")
    patcher._patch(Progress(step=5))
    assert sent == [contract.progress_configmap_patch(Progress(step=5), "tuner1")]
    assert list(sent[0]["data"]) == ["progress.tuner1.json"]
    record = contract.progress_from_configmap(sent[0], "tuner1")
    assert record == Progress(step=5).to_status()


def test_roles_from_the_environment() -> None:
    assert not roles.from_env({}).parallel
    env = {
        contract.ENV_ORACLE_IP: "job-oracle-0.job",
        contract.ENV_ORACLE_PORT: "8000",
        contract.ENV_TUNER_ID: contract.ORACLE_TUNER_ID,
        contract.ENV_TRIAL_GROUPS: "3",
    }
    oracle = roles.from_env(env)
    assert oracle.is_oracle and not oracle.is_group and not oracle.runs_post_search
    assert oracle.trial_groups == 3 and oracle.oracle_wait_seconds == 600
    g0 = roles.from_env({**env, contract.ENV_TUNER_ID: contract.trial_group_tuner_id(0)})
    g2 = roles.from_env({**env, contract.ENV_TUNER_ID: "tuner2", roles.ENV_ORACLE_WAIT: "30"})
    assert (
        g0.is_group and g0.runs_post_search and g0.own_file("tfdata.json") == "tfdata.tuner0.json"
    )
    assert g2.is_group and not g2.runs_post_search and g2.oracle_wait_seconds == 30
    assert roles.Role().own_file("tfdata.json") == "tfdata.json"
