"""The TuningJob spec, parsed and validated in one place for the operator and the trainer.

`JobSpec.from_dict(spec)` reads every field of a TuningJob's `spec` once, with the
CRD's defaults (a unit test keeps them in sync), and runs every check that needs no
cluster: types and bounds, the search's fields, the checks across fields. What it
refuses is in `JobSpec.errors`, each a `SpecError` whose one-line message names the
field and says what is allowed. The operator adds what needs Kubernetes (tuneop.api.spec:
quantities, access modes, the pod template, the script's ConfigMap and an existing
claim as read from the API server) and fails the job with them all; the trainer raises
the first and exits 2 (tuneop_trainer.spec, which also loads the spec file and asks
keras-tuner for a metric's direction).

Modules, one per part of the spec: `job` (the whole spec), `script`, `data`, `tuner`,
`distribution`, `checkpoint`, `failure`, on `read` (one typed field) and `errors`.
Standard library only, as the whole contract.
"""

from .checkpoint import DEFAULT_ACCESS_MODE, PARALLEL_ACCESS_MODE, Checkpoint
from .data import DataSpec
from .distribution import DEFAULT_GPU_RESOURCE, STRATEGIES, Distribution, Elastic, Shape
from .errors import SpecError
from .failure import FailurePolicy
from .job import DEFAULT_HYPERMODEL, DEFAULT_ORACLE_RESOURCES, JobSpec
from .script import Script, entry_script_key
from .tuner import (
    ALGORITHMS,
    DIRECTIONS,
    DTYPE_POLICIES,
    CallbackSpec,
    EarlyStoppingSpec,
    MetricDirection,
    TunerSpec,
)

__all__ = [
    "ALGORITHMS",
    "DEFAULT_ACCESS_MODE",
    "DEFAULT_GPU_RESOURCE",
    "DEFAULT_HYPERMODEL",
    "DEFAULT_ORACLE_RESOURCES",
    "DIRECTIONS",
    "DTYPE_POLICIES",
    "PARALLEL_ACCESS_MODE",
    "STRATEGIES",
    "CallbackSpec",
    "Checkpoint",
    "DataSpec",
    "Distribution",
    "EarlyStoppingSpec",
    "Elastic",
    "FailurePolicy",
    "JobSpec",
    "MetricDirection",
    "Script",
    "Shape",
    "SpecError",
    "TunerSpec",
    "entry_script_key",
]
