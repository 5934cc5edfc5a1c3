"""The kinds of TuningJob the chaos soak runs, built from the e2e tests' own searches
(tests/e2e/harness.py and the tests that define them), and the seeded mix of kinds over
the soak's job slots. The queued kind is the stand-in sent to the soak's LocalQueue (the
label tests/e2e/test_queue.py puts on its jobs): admitted by Kueue when the soak runs it,
an ordinary job when it does not (the label is inert without Kueue)."""

from __future__ import annotations

import copy
import dataclasses
import random
from typing import Any

from tuneop.api.queue import QUEUE_LABEL

from tests.e2e.harness import SCRIPT_SEARCH, SEARCH, sample, script_sample
from tests.e2e.test_operator_elastic import ELASTIC
from tests.e2e.test_operator_parallel import parallel_search
from tests.localcluster import standin_trainer as standin

Obj = dict[str, Any]

STANDIN = "standin"
SPEC = "spec"
SCRIPT = "script"
PARALLEL = "parallel"
TWO_WORKERS = "two-workers"
ELASTIC_KIND = "elastic"
QUEUED = "queued"
JOB_KINDS: tuple[str, ...] = (
    STANDIN, SPEC, SCRIPT, PARALLEL, TWO_WORKERS, ELASTIC_KIND, QUEUED,
)  # fmt: skip
WEIGHTS: dict[str, int] = {
    STANDIN: 3,
    QUEUED: 2,
    SPEC: 1,
    SCRIPT: 1,
    PARALLEL: 1,
    TWO_WORKERS: 1,
    ELASTIC_KIND: 1,
}
"""The stand-in trainer costs no TensorFlow: most slots run it (plain or queued), so 2
cores hold the soak."""
QUEUED_KINDS: tuple[str, ...] = (QUEUED,)
"""Kinds sent to the soak's LocalQueue: the Kueue faults act on these."""
LOCAL_QUEUE = "chaos-lq"
"""The LocalQueue of every queued job (one in each queued job's namespace)."""

STANDIN_TRIALS = 12
STANDIN_TRIAL_SECONDS = 6.0
MAX_PREEMPTIONS = 1000
"""Budget of every soak job: the soak's faults are not meant to fail a job."""
JOB_NAME = "search"
STORAGE_CLASS = "chaos-sized"
"""Every soak job's claim comes from this StorageClass: a tmpfs of the claim's size
(tests/localcluster/nodeagent/provisioner.py), which the claim-full fault can fill."""


@dataclasses.dataclass(frozen=True)
class Known:
    """A job kind's known uninterrupted result: every run ends with these."""

    trials: int
    best_trial: str
    best_score: float


def queued(kind: str) -> bool:
    """Whether jobs of `kind` are sent to the soak's LocalQueue."""
    return kind in QUEUED_KINDS


def known(kind: str) -> Known | None:
    """The stand-in's result is known without a twin run: trial i scores i / trials (the
    queued kind is the stand-in too)."""
    if kind not in (STANDIN, QUEUED):
        return None
    last = STANDIN_TRIALS - 1
    return Known(STANDIN_TRIALS, standin.trial_id(last), last / STANDIN_TRIALS)


def job_mix(seed: int, slots: int, kinds: tuple[str, ...] = JOB_KINDS) -> list[str]:
    """Each slot's kind: every kind once while slots last (in a seeded order), then
    drawn by WEIGHTS."""
    rng = random.Random(seed ^ 0x5EED)
    first = list(kinds)
    rng.shuffle(first)
    rest = rng.choices(
        list(kinds), [WEIGHTS.get(k, 1) for k in kinds], k=max(0, slots - len(first))
    )
    return (first + rest)[:slots]


def _budget(spec: Obj) -> Obj:
    policy = dict(spec.get("failurePolicy") or {})
    policy["maxPreemptions"] = MAX_PREEMPTIONS
    return {**spec, "failurePolicy": policy, "terminationGracePeriodSeconds": 15}


def spec_fields(kind: str) -> Obj:
    """The spec fields of `kind` over the sample's."""
    search = copy.deepcopy(SEARCH)
    if kind in (STANDIN, QUEUED):
        return _budget({
            "env": standin.env(STANDIN_TRIALS, STANDIN_TRIAL_SECONDS, step_seconds=0.5),
            "distribution": {"strategy": "Auto", "workers": 1, "gpusPerWorker": 1},
        })  # fmt: skip
    if kind == SPEC:
        return _budget(search)
    if kind == PARALLEL:
        return _budget(parallel_search(trials=4, epochs=1))
    if kind == TWO_WORKERS:
        small = {"synthetic": {"samples": 256, "seed": 0}, "validationSplit": 0.25}
        dist = {"strategy": "Auto", "workers": 2, "gpusPerWorker": 1}
        return _budget({**search, "data": small, "distribution": dist})
    if kind == ELASTIC_KIND:
        return _budget({**search, "distribution": copy.deepcopy(ELASTIC)})
    if kind == SCRIPT:
        return _budget(copy.deepcopy(SCRIPT_SEARCH))
    raise ValueError(f"unknown job kind {kind!r}")


def document(kind: str, namespace: str, name: str = JOB_NAME, adopt: bool = False) -> Obj:
    """The TuningJob of `kind` in `namespace`; `adopt`: it continues the search a job
    of its name left on the retained claim (a job re-created under its name). A queued
    kind carries the LocalQueue label, so a re-created job queues again."""
    build = script_sample if kind == SCRIPT else sample
    doc = build(name, namespace, **spec_fields(kind))
    checkpoint = doc["spec"].setdefault("checkpoint", {})
    checkpoint["storageClassName"] = STORAGE_CLASS
    if adopt:
        checkpoint["adopt"] = True
    doc["metadata"]["labels"] = {"tuneop.io/chaos-kind": kind}
    if queued(kind):
        doc["metadata"]["labels"][QUEUE_LABEL] = LOCAL_QUEUE
    return doc
