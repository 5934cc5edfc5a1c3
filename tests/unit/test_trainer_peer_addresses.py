"""A multi-worker trainer waits for the other workers' addresses to resolve before it
builds MultiWorkerMirroredStrategy (tuneop_trainer/strategy.py), without TensorFlow."""

from __future__ import annotations

import json
import socket

from tuneop_contract import ENV_TF_CONFIG
from tuneop_trainer.strategy import wait_for_peer_addresses

HOSTS = [f"search-worker-{i}.search-workers.ns.svc:2222" for i in range(3)]


def _env(index: int, chief: list[str] | None = None) -> dict[str, str]:
    cluster: dict[str, list[str]] = {"worker": HOSTS}
    if chief is not None:
        cluster["chief"] = chief
    config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
    return {ENV_TF_CONFIG: json.dumps(config)}


class Resolver:
    """Resolves a host once it has been asked `unknown_for` times (a DNS record that
    appears when the peer's pod gets its IP)."""

    def __init__(self, unknown_for: int) -> None:
        self.unknown_for = unknown_for
        self.asked: list[tuple[str, str]] = []

    def __call__(self, host: str, port: str) -> object:
        self.asked.append((host, port))
        if sum(1 for h, _ in self.asked if h == host) <= self.unknown_for:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port)))]


def test_waits_until_every_other_worker_resolves() -> None:
    resolve, slept = Resolver(unknown_for=3), []
    assert wait_for_peer_addresses(_env(1), resolve=resolve, sleep=slept.append)
    asked = {host for host, _ in resolve.asked}
    assert asked == {
        "search-worker-0.search-workers.ns.svc",
        "search-worker-2.search-workers.ns.svc",
    }
    assert all(port == "2222" for _, port in resolve.asked)
    assert len(slept) == 6  # three misses for each of the two peers


def test_a_chief_is_a_peer_and_a_worker_without_peers_does_not_wait() -> None:
    resolve = Resolver(unknown_for=0)
    assert wait_for_peer_addresses(_env(0, chief=["chief-0.svc:2222"]), resolve=resolve)
    assert ("chief-0.svc", "2222") in resolve.asked and len(resolve.asked) == 3
    never = Resolver(unknown_for=10**6)
    assert wait_for_peer_addresses({}, resolve=never) and never.asked == []


def test_gives_up_after_the_timeout_and_lets_tensorflow_report() -> None:
    resolve, slept = Resolver(unknown_for=10**6), []
    assert not wait_for_peer_addresses(_env(0), timeout=0.0, resolve=resolve, sleep=slept.append)
    assert len(resolve.asked) == 1 and slept == []
