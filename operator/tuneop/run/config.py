"""The operator's configuration: TUNEOP_OPERATOR_* environment variables, read and
validated once at start-up (an invalid value stops the operator with a clear message).
(The trainer's TUNEOP_* variables are in tuneop_contract; the prefix here differs so the
two never collide.)"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
from collections.abc import Mapping
from typing import Any

import tuneop_contract as contract

from ..api.podtemplate import Defaults
from .watched import RESYNC_SECONDS

PREFIX = "TUNEOP_OPERATOR_"


class ConfigError(ValueError):
    """An invalid TUNEOP_OPERATOR_* value; the message names the variable."""


@dataclasses.dataclass(frozen=True)
class Config:
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty = the whole cluster."""
    metrics_port: int = 8080
    health_port: int = 8081
    peering_name: str = "tuneop"
    """Cluster-wide kopf peering object; empty string = standalone (no peering)."""
    priority: int = 0
    """kopf peering priority; replicas must differ (default: random per process)."""
    peering_lifetime_seconds: int = 60
    """How long the other replicas take this one's peering record as alive after its
    last keep-alive (sent every lifetime - 5..10 s): how soon a standby takes over from
    a replica that crashed or froze. kopf's default."""
    reconcile_seconds: float = 2.0
    """Shortest time between two timed passes of a job: the soonest a pass after one
    that wrote pods runs, and a deadline's floor (an event wakes the job at once)."""
    resync_seconds: float = RESYNC_SECONDS
    """Longest time between two passes of an unfinished job with no deadline and no
    event (a level-based safety net, as an informer's resync): also how long what the
    watches delivered is trusted before a pass reads it live again (run.watched)."""
    trainer_metrics_port: int = contract.DEFAULT_METRICS_PORT
    trainer_uid: int = 1000
    progress_interval_seconds: float = contract.DEFAULT_PROGRESS_INTERVAL_SECONDS
    """At most one steady progress write per trainer per this many seconds (each is an
    etcd write and a status patch); milestones are sent at once."""
    log_level: str = "INFO"
    request_timeout_seconds: float = 30.0
    """Longest wait for one API call (connect + response): a half-open connection fails
    the pass, which is retried, instead of blocking a reconcile thread for ever."""
    pass_threads: int = 16
    """Threads that run passes: a pass waits on the API server for most of its time (a
    status patch, sometimes a few reads), one request after another, so at scale the
    passes in flight are bounded by this, not by CPU. The Kube client keeps as many
    connections (plus KOPF_HANDLER_CONNECTIONS)."""
    error_backoff_max_seconds: float = 60.0
    """After consecutive failed passes the next waits reconcile_seconds·2^(n-1), at most
    this long."""
    unhealthy_after_seconds: float = 300.0
    """`/healthz` fails when job loops are failing and no pass of any job has succeeded
    for this long (run.health)."""
    trainer_defaults: Defaults = dataclasses.field(default_factory=Defaults)
    """Cluster-wide trainer defaults (TRAINER_IMAGE, TRAINER_IMAGE_PULL_SECRETS,
    TRAINER_TOLERATIONS, TRAINER_PRIORITY_CLASS_NAME), each filling a job's field the
    job leaves unset (podtemplate.with_defaults)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        read = _Env(os.environ if env is None else env)
        namespaces = tuple(
            n.strip() for n in (read.get("NAMESPACES") or "").split(",") if n.strip()
        )
        interval = read.number("RECONCILE_SECONDS", cls.reconcile_seconds, 0.1, 300)
        level = (read.get("LOG_LEVEL") or "INFO").upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"{PREFIX}LOG_LEVEL={level!r}: one of DEBUG, INFO, WARNING, ERROR")
        return cls(
            namespaces=namespaces,
            metrics_port=read.integer("METRICS_PORT", 8080, 0, 65535),
            health_port=read.integer("HEALTH_PORT", 8081, 0, 65535),
            peering_name=read.env.get(PREFIX + "PEERING", "tuneop").strip(),
            priority=read.integer("PRIORITY", random.randint(1, 2**31 - 1), 0, 2**31 - 1),
            peering_lifetime_seconds=read.integer(
                "PEERING_LIFETIME_SECONDS", cls.peering_lifetime_seconds, 2, 3600
            ),
            reconcile_seconds=interval,
            resync_seconds=read.number("RESYNC_SECONDS", cls.resync_seconds, 10, 3600),
            trainer_metrics_port=read.integer(
                "TRAINER_METRICS_PORT", contract.DEFAULT_METRICS_PORT, 0, 65535
            ),
            trainer_uid=read.integer("TRAINER_UID", 1000, 1, 2**31 - 1),
            progress_interval_seconds=read.number(
                "PROGRESS_INTERVAL_SECONDS", cls.progress_interval_seconds, 1, 3600
            ),
            log_level=level,
            request_timeout_seconds=read.number(
                "REQUEST_TIMEOUT_SECONDS", cls.request_timeout_seconds, 1, 600
            ),
            pass_threads=read.integer("PASS_THREADS", cls.pass_threads, 1, 256),
            error_backoff_max_seconds=read.number(
                "ERROR_BACKOFF_MAX_SECONDS", cls.error_backoff_max_seconds, 1, 3600
            ),
            unhealthy_after_seconds=read.number(
                "UNHEALTHY_AFTER_SECONDS", cls.unhealthy_after_seconds, 10, 86400
            ),
            trainer_defaults=trainer_defaults(read.get),
        )


KOPF_HANDLER_CONNECTIONS = 4
"""Connections of the Kube client beyond the pass threads: kopf's thread pool runs the
cleanup handler of a deleted job beside the passes."""


class _Env:
    """TUNEOP_OPERATOR_* variables, each checked as it is read (ConfigError names it)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def get(self, name: str) -> str | None:
        """The variable's value, None when unset or blank."""
        value = self.env.get(PREFIX + name)
        return value.strip() if value is not None and value.strip() != "" else None

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        raw = self.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{PREFIX}{name}={raw!r}: not an integer") from None
        if not low <= value <= high:
            raise ConfigError(f"{PREFIX}{name}={value}: must be in [{low}, {high}]")
        return value

    def number(self, name: str, default: float, low: float, high: float) -> float:
        raw = self.get(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{PREFIX}{name}={raw!r}: not a number") from None
        if not low <= value <= high:
            raise ConfigError(f"{PREFIX}{name}={value}: must be in [{low}, {high}]")
        return value


DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


def trainer_defaults(get: Any) -> Defaults:
    """The TUNEOP_OPERATOR_TRAINER_* defaults, each checked as the API server would
    check the job field it fills (a bad one stops the operator, naming the variable)."""
    image = get("TRAINER_IMAGE") or ""
    if any(c.isspace() for c in image):
        raise ConfigError(f"{PREFIX}TRAINER_IMAGE={image!r}: an image reference has no spaces")
    secrets = tuple(
        s.strip() for s in (get("TRAINER_IMAGE_PULL_SECRETS") or "").split(",") if s.strip()
    )
    priority = get("TRAINER_PRIORITY_CLASS_NAME") or ""
    for name, value in [*(("TRAINER_IMAGE_PULL_SECRETS", s) for s in secrets),
                        ("TRAINER_PRIORITY_CLASS_NAME", priority)]:  # fmt: skip
        if value and (len(value) > 253 or not DNS_SUBDOMAIN.match(value)):
            raise ConfigError(f"{PREFIX}{name}: {value!r} is not a valid object name")
    raw = get("TRAINER_TOLERATIONS")
    tolerations: list[dict[str, Any]] = []
    if raw is not None:
        try:
            tolerations = json.loads(raw)
        except ValueError:
            raise ConfigError(f"{PREFIX}TRAINER_TOLERATIONS: not JSON: {raw!r}") from None
        if not isinstance(tolerations, list) or not all(
            isinstance(t, dict) and set(t) <= TOLERATION_KEYS for t in tolerations
        ):
            raise ConfigError(
                f"{PREFIX}TRAINER_TOLERATIONS: must be a JSON list of Tolerations "
                f"(keys {', '.join(sorted(TOLERATION_KEYS))}): {raw!r}"
            )
        for t in tolerations:
            if t.get("operator", "Equal") not in ("Exists", "Equal") or t.get("effect", "") not in (
                "",
                "NoSchedule",
                "PreferNoSchedule",
                "NoExecute",
            ):
                raise ConfigError(f"{PREFIX}TRAINER_TOLERATIONS: invalid operator or effect in {t}")
    return Defaults(
        image=image,
        image_pull_secrets=secrets,
        tolerations=tuple(tolerations),
        priority_class_name=priority,
    )
