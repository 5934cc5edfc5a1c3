"""Pick the one tf.distribute strategy of this process, before any other TF op.

TF_CONFIG with several workers → MultiWorkerMirroredStrategy; several GPUs →
MirroredStrategy; no GPU and TUNEOP_LOGICAL_CPU_DEVICES=N>1 → MirroredStrategy over N
logical CPU devices (how tests exercise cross-replica code without GPUs); else the
default strategy. Logical devices can only be configured before TF initialises its
runtime, hence "before any TF op". Beside it, what the rest of the trainer asks of a
MultiWorkerMirroredStrategy group: is this one (`is_multiworker`), a barrier, the same
value on every worker, and `PeerLost` for a worker gone (patches/multiworker.py raises it).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from tuneop_contract import ENV_LOGICAL_CPU_DEVICES, ENV_TF_CONFIG

from . import preemption

log = logging.getLogger(__name__)


def tf_config_workers(environ: dict[str, str] | None = None) -> tuple[int, int]:
    """(number of workers, this task's index) from TF_CONFIG; (1, 0) without it."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_TF_CONFIG, "")
    if not raw:
        return 1, 0
    config = json.loads(raw)
    cluster = config.get("cluster", {})
    workers = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
    task = config.get("task", {})
    index = int(task.get("index", 0))
    if task.get("type") == "worker" and cluster.get("chief"):
        index += 1
    return max(workers, 1), index


PEER_WAIT_SECONDS = 300.0
"""How long a worker waits for the other workers' addresses to resolve before it lets
TensorFlow try (and fail, counted as a trainer failure)."""


def _peer_addresses(environ: dict[str, str] | None = None) -> list[str]:
    """The `host:port` of every other task in TF_CONFIG's cluster."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_TF_CONFIG, "")
    if not raw:
        return []
    config = json.loads(raw)
    task = config.get("task", {})
    own = (task.get("type"), int(task.get("index", 0)))
    return [
        address
        for kind, addresses in config.get("cluster", {}).items()
        for index, address in enumerate(addresses)
        if (kind, index) != own
    ]


def wait_for_peer_addresses(
    environ: dict[str, str] | None = None,
    timeout: float = PEER_WAIT_SECONDS,
    resolve: Callable[[str, str], object] = socket.getaddrinfo,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Until every other worker's address in TF_CONFIG resolves; whether all did within
    `timeout`. The pods of a group start seconds apart (scheduling, image pulls), a
    pod's name enters the cluster's DNS (its headless Service) only once it has an IP,
    and TensorFlow aborts its first collective op when a peer's name does not resolve
    yet ("UnavailableError: errors resolving ..."), which would cost the whole group a
    restart and the job a failure."""
    waiting = _peer_addresses(environ)
    deadline = time.monotonic() + timeout
    logged = 0.0
    while waiting:
        if preemption.requested():  # the group is going: it never started, nothing to save
            raise preemption.Preempted()
        host, _, port = waiting[0].rpartition(":")
        try:
            resolve(host.strip("[]"), port)
        except (OSError, UnicodeError):
            now = time.monotonic()
            if now >= deadline:
                log.warning("worker address %s does not resolve: starting anyway", waiting[0])
                return False
            if now - logged >= 10:
                log.info("waiting for worker address %s to resolve", waiting[0])
                logged = now
            sleep(0.2)
            continue
        waiting.pop(0)
    return True


_created: list[Any] = []


def create(requested: str = "Auto") -> Any:
    """Create and return the strategy; logs which one and how many replicas. Once per
    process: a second call (e.g. from a user script that uses this module under
    `exec`) returns the same strategy."""
    if _created:
        return _created[0]
    import tensorflow as tf

    workers, _ = tf_config_workers()
    if workers > 1 or requested == "MultiWorkerMirrored":
        wait_for_peer_addresses()
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        preemption.reclaim()  # the coordination service took SIGTERM over
        kind = "MultiWorkerMirroredStrategy"
    else:
        gpus = tf.config.list_physical_devices("GPU")
        logical = int(os.environ.get(ENV_LOGICAL_CPU_DEVICES, "0") or 0)
        if len(gpus) > 1 or (gpus and requested == "Mirrored"):
            strategy = tf.distribute.MirroredStrategy()
            kind = f"MirroredStrategy over {len(gpus)} GPUs"
        elif not gpus and logical > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(logical)]
            )
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
            strategy = tf.distribute.MirroredStrategy(devices)
            kind = f"MirroredStrategy over {len(devices)} logical CPU devices"
        elif requested == "Mirrored":
            strategy = tf.distribute.MirroredStrategy()
            kind = "MirroredStrategy"
        else:
            strategy = tf.distribute.get_strategy()
            kind = "default strategy"
    log.info(
        "strategy: %s, %d replica(s); devices: %s",
        kind,
        strategy.num_replicas_in_sync,
        describe_devices(),
    )
    _created.append(strategy)
    return strategy


def describe_devices() -> str:
    """The GPUs TensorFlow sees, with compute capability, for the start-up log line
    (a GPU pod whose image cannot see its GPU says so here, not by training slowly)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        built = "CUDA build" if tf.test.is_built_with_cuda() else "CPU-only TensorFlow build"
        return f"no GPU ({built}), {len(tf.config.list_logical_devices('CPU'))} CPU device(s)"
    parts = []
    for gpu in gpus:
        details = tf.config.experimental.get_device_details(gpu)
        capability = details.get("compute_capability")
        cc = f"compute capability {capability[0]}.{capability[1]}" if capability else "?"
        parts.append(f"{gpu.name} {details.get('device_name', '')} ({cc})".replace("  ", " "))
    return f"{len(gpus)} GPU(s): " + ", ".join(parts)


def is_chief() -> bool:
    """Only the chief writes the checkpoint directory (all workers compute the same)."""
    return tf_config_workers()[1] == 0


class PeerLost(preemption.Preempted):
    """A collective op failed because another worker of the group is gone."""


def is_multiworker(strategy: Any) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def barrier(strategy: Any) -> None:
    """Under MWMS: return once every worker got here (a cross-worker all-reduce)."""
    if not is_multiworker(strategy):
        return
    import tensorflow as tf

    ones = strategy.run(lambda: tf.constant(1.0))
    strategy.reduce("SUM", ones, axis=None)


def same_on_every_worker(strategy: Any, value: int) -> bool:
    """Under MWMS: whether every worker holds `value` (one all-reduce: the sum over the
    replicas equals this worker's value times their number only if no worker differs);
    True elsewhere. Workers that disagree on, say, a fit's seed would each train their
    replica on other batches, and the group would compute another result silently."""
    if not is_multiworker(strategy):
        return True
    import tensorflow as tf

    own = float(value % (1 << 24))  # exact in float64, summed over a few workers
    total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(own, tf.float64)), axis=None)
    return float(total) == own * strategy.num_replicas_in_sync
