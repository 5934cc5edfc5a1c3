"""`spec.failurePolicy`: what the operator tolerates before it fails the job."""

from __future__ import annotations

import dataclasses

from .errors import SpecError
from .read import Doc, integer


@dataclasses.dataclass(frozen=True)
class FailurePolicy:
    max_failures: int = 3
    backoff_seconds: int = 10
    max_backoff_seconds: int = 300
    max_preemptions: int = 20
    max_trial_ooms: int = 10
    """Trials that ran out of memory (each recorded FAILED, the search going on)
    tolerated before the job fails: more means the pods are too small for this space."""

    def backoff(self, failures: int) -> int:
        """Delay before the retry that follows failure number `failures` (1-based):
        backoffSeconds doubled per earlier failure, capped at maxBackoffSeconds."""
        if failures <= 0:
            return 0
        delay = self.backoff_seconds * 2 ** min(failures - 1, 32)
        return int(min(delay, self.max_backoff_seconds))


def parse_failure_policy(fp: Doc) -> FailurePolicy:
    field, d = "spec.failurePolicy", FailurePolicy()
    return FailurePolicy(
        max_failures=integer(fp, "maxFailures", f"{field}.maxFailures", d.max_failures),
        backoff_seconds=integer(fp, "backoffSeconds", f"{field}.backoffSeconds", d.backoff_seconds),
        max_backoff_seconds=integer(
            fp, "maxBackoffSeconds", f"{field}.maxBackoffSeconds", d.max_backoff_seconds
        ),
        max_preemptions=integer(fp, "maxPreemptions", f"{field}.maxPreemptions", d.max_preemptions),
        max_trial_ooms=integer(fp, "maxTrialOOMs", f"{field}.maxTrialOOMs", d.max_trial_ooms),
    )


def check_failure_policy(policy: FailurePolicy) -> list[SpecError]:
    if policy.max_backoff_seconds < policy.backoff_seconds:
        return [SpecError("spec.failurePolicy.maxBackoffSeconds", "must be >= backoffSeconds")]
    return []
