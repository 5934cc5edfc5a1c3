"""The oracle role's changes to keras-tuner 1.4.8's Oracle and the trial groups' client,
in-process on a real keras-tuner oracle reloaded from disk, as a restarted oracle pod
has it (no training: seconds). The patches are process-wide, so each test installs
them and the fixture puts keras-tuner back for the other test modules."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import keras_tuner
import pytest
from keras_tuner.src.distribute import oracle_chief, oracle_client
from keras_tuner.src.engine import base_tuner
from keras_tuner.src.engine import oracle as oracle_module
from parallel_helpers import free_port
from trainer_helpers import in_project
from tuneop_contract import (
    ENV_FAILED_TRIALS,
    ENV_ORACLE_IP,
    ENV_ORACLE_PORT,
    ENV_TUNER_ID,
)
from tuneop_trainer.parallel import client, group, roles
from tuneop_trainer.parallel import oracle as par_oracle

PATCHED = ("get_state", "set_state", "reload", "create_trial", "update_trial", "end_trial")


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = {name: oracle_module.Oracle.__dict__[name] for name in PATCHED}
    saved_server = oracle_chief.start_server
    saved_client = oracle_client.OracleClient
    saved_search = base_tuner.BaseTuner.search
    saved_end = base_tuner.BaseTuner.on_trial_end
    monkeypatch.setitem(par_oracle._state, "installed", False)
    monkeypatch.setattr(client, "_installed", [False])
    monkeypatch.setattr(group, "_installed", [False])
    monkeypatch.setattr(roles, "_role", [])
    par_oracle.install()
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(oracle_module.Oracle, name, value)
        oracle_chief.start_server = saved_server
        oracle_client.OracleClient = saved_client
        base_tuner.BaseTuner.search = saved_search
        base_tuner.BaseTuner.on_trial_end = saved_end


def _oracle(root: Path) -> Any:
    hp = keras_tuner.HyperParameters()
    hp.Int("units", 1, 100)
    oracle = keras_tuner.oracles.RandomSearchOracle(
        objective="loss", max_trials=4, hyperparameters=hp, seed=1
    )
    return in_project(oracle, root)


def _end(oracle: Any, trial: Any, loss: float = 0.5) -> None:
    oracle.update_trial(trial.trial_id, {"loss": loss})
    trial.status = "COMPLETED"
    oracle.end_trial(trial)


def test_a_returning_group_gets_its_own_trial_back(patched: None, tmp_path: Path) -> None:
    oracle = _oracle(tmp_path)
    a = oracle.create_trial("tuner0")
    b = oracle.create_trial("tuner1")
    # the oracle dies; a new one reloads the project
    again = _oracle(tmp_path)
    assert again._retry_queue == []  # keras-tuner alone would queue both for anyone
    assert {k: t.trial_id for k, t in again.ongoing_trials.items()} == {
        "tuner0": a.trial_id,
        "tuner1": b.trial_id,
    }
    assert again.create_trial("tuner1").trial_id == b.trial_id
    assert again.create_trial("tuner0").trial_id == a.trial_id
    assert again.create_trial("tuner0").status == "RUNNING"
    assert len(again.trials) == 2


def test_end_trial_is_idempotent(patched: None, tmp_path: Path) -> None:
    oracle = _oracle(tmp_path)
    trial = oracle.create_trial("tuner0")
    _end(oracle, trial)
    _end(oracle, trial)  # the worker's retry of an EndTrial that had landed
    assert oracle.end_order == [trial.trial_id]
    assert dict(oracle._run_times) == {trial.trial_id: 1}
    assert oracle.trials[trial.trial_id].metrics.get_history("loss")[0].value == [0.5]
    reloaded = _oracle(tmp_path)
    _end(reloaded, trial)  # ... also after a restart
    assert reloaded.end_order == [trial.trial_id]


def test_a_trial_ended_before_the_kill_is_not_handed_out_again(
    patched: None, tmp_path: Path
) -> None:
    """keras-tuner saves oracle.json in end_trial before it pops the ongoing entry: a
    kill in between leaves an ended trial "ongoing" on disk."""
    oracle = _oracle(tmp_path)
    trial = oracle.create_trial("tuner0")
    original = oracle_module.Oracle.save
    saves = []

    def save_then_die(self: Any) -> None:
        original(self)
        saves.append(1)
        if len(saves) == 1:
            raise SystemExit("killed")

    oracle.update_trial(trial.trial_id, {"loss": 0.5})
    trial.status = "COMPLETED"
    oracle.save = save_then_die.__get__(oracle)
    with pytest.raises(SystemExit):
        oracle.end_trial(trial)
    again = _oracle(tmp_path)
    assert again.ongoing_trials == {} and again.end_order == [trial.trial_id]
    _end(again, trial)  # the worker retries: nothing changes
    assert again.end_order == [trial.trial_id] and dict(again._run_times) == {"0": 1}
    assert again.create_trial("tuner0").trial_id == "1"


def test_the_search_is_over_after_a_restart(patched: None, tmp_path: Path) -> None:
    oracle = _oracle(tmp_path)
    trials = {g: oracle.create_trial(g) for g in ("tuner0", "tuner1")}
    _end(oracle, trials["tuner0"])
    _end(oracle, trials["tuner1"])
    for g in ("tuner0", "tuner1"):
        _end(oracle, oracle.create_trial(g))
    assert oracle.create_trial("tuner0").status == "STOPPED"
    assert not par_oracle.search_over(oracle)  # tuner1 was not told yet
    again = _oracle(tmp_path)  # tuner_ids and the STOPPED survive the restart
    assert again.tuner_ids == {"tuner1"} and not par_oracle.search_over(again)
    assert again.create_trial("tuner1").status == "STOPPED"
    assert par_oracle.search_over(again)
    assert par_oracle.search_over(_oracle(tmp_path))


def test_a_raising_call_releases_the_oracle(patched: None, tmp_path: Path) -> None:
    oracle = _oracle(tmp_path)
    with pytest.raises(KeyError):
        oracle.update_trial("nope", {"loss": 1.0})
    done = []
    thread = threading.Thread(target=lambda: done.append(oracle.create_trial("tuner0")))
    thread.start()
    thread.join(5)
    assert done, "the oracle stayed locked after an error (keras-tuner's synchronized)"


# -- the client ---------------------------------------------------------------------


class _Server:
    def __init__(self, oracle: Any, port: int) -> None:
        import grpc
        from keras_tuner.src import protos

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        protos.get_service_grpc().add_OracleServicer_to_server(
            oracle_chief.OracleServicer(oracle), self.server
        )
        self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=0).wait()


def _client(monkeypatch: pytest.MonkeyPatch, port: int, tmp: Path, **env: str) -> Any:
    monkeypatch.setenv(ENV_ORACLE_IP, "127.0.0.1")
    monkeypatch.setenv(ENV_ORACLE_PORT, str(port))
    monkeypatch.setenv(ENV_TUNER_ID, "tuner1")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    roles._role.clear()
    client.install()
    return oracle_client.OracleClient(_oracle(tmp / "local"))


def test_client_survives_an_oracle_restart(
    patched: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    oracle = _oracle(tmp_path)
    server = _Server(oracle, port)
    c = _client(monkeypatch, port, tmp_path)
    first = c.create_trial("tuner1")
    server.stop()

    def come_back() -> None:
        time.sleep(1.5)
        holder.append(_Server(_oracle(tmp_path), port))

    holder: list[_Server] = []
    threading.Thread(target=come_back).start()
    t0 = time.monotonic()
    assert c.create_trial("tuner1").trial_id == first.trial_id  # its own, after the restart
    assert time.monotonic() - t0 < 10
    holder[0].stop()


def test_client_gives_up_after_its_bound(
    patched: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = _client(monkeypatch, free_port(), tmp_path, **{roles.ENV_ORACLE_WAIT: "2"})
    t0 = time.monotonic()
    with pytest.raises(client.OracleUnreachable):
        c.get_space()
    assert 1.5 < time.monotonic() - t0 < 10


def test_client_stops_on_the_done_marker_without_the_oracle(
    patched: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = _client(monkeypatch, free_port(), tmp_path, **{roles.ENV_ORACLE_WAIT: "30"})
    marker = roles.search_done_path(tmp_path / "local", "p")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("{}")
    t0 = time.monotonic()
    assert c.create_trial("tuner1").status == "STOPPED"
    assert time.monotonic() - t0 < 2


def test_client_ends_a_failed_trial_without_running_it(
    patched: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    oracle = _oracle(tmp_path)
    assert oracle.create_trial("tuner1").trial_id == "0"  # then its pod was OOMKilled
    server = _Server(oracle, port)
    try:
        c = _client(monkeypatch, port, tmp_path, **{ENV_FAILED_TRIALS: "0:OOMKilled"})
        trial = c.create_trial("tuner1")
        assert trial.trial_id == "1" and trial.status == "RUNNING"
        assert oracle.trials["0"].status == "FAILED"
        assert "out of memory" in oracle.trials["0"].message
        assert oracle.end_order == ["0"]
    finally:
        server.stop()
