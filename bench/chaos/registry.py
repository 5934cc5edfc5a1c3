"""Every fault kind of the schedule (bench/chaos/schedule.py) → the function that
injects it (bench/chaos/faults.py, bench/chaos/claims.py)."""

from __future__ import annotations

from collections.abc import Callable

from bench.chaos import claims, faults
from bench.chaos import schedule as s
from bench.chaos.ledger import FaultRecord

FAULTS: dict[str, Callable[[faults.Context, FaultRecord, s.Planned], None]] = {
    s.POD_SIGKILL: faults.pod_fault(0, evict=False),
    s.POD_SIGTERM: faults.pod_fault(None, evict=False),
    s.POD_EVICT: faults.pod_fault(None, evict=True),
    s.SCHEDULER_PREEMPT: faults.scheduler_preempt,
    s.NODE_CRASH: faults.node_crash,
    s.NODE_DRAIN: faults.node_drain,
    s.APISERVER_RESTART: faults.apiserver_restart,
    s.ETCD_RESTART: faults.etcd_restart,
    s.OPERATOR_KILL: faults.operator_kill,
    s.PROGRESS_CONFIGMAP_DELETE: faults.progress_configmap_delete,
    s.SUSPEND_RESUME: faults.suspend_resume,
    s.JOB_RECREATE: faults.job_recreate,
    s.KUEUE_PREEMPT: faults.kueue_preempt,
    s.KUEUE_CONTROLLER_RESTART: faults.kueue_controller_restart,
    s.QUOTA_SHRINK: faults.quota_shrink,
    s.CLAIM_FULL: claims.claim_full,
}
assert set(FAULTS) == set(s.FAULT_KINDS)
