"""A worker of a multi-worker group failed while its peers have not ended: wait for them
before counting the failure.

Under MultiWorkerMirroredStrategy a worker exits with an error as soon as a peer is gone
(a collective fails, or TensorFlow's coordination service ends the process), and the
peer's loss may not show yet: a node that crashed is reported not ready only after the
node controller's grace period (50 s by default), its pods are evicted only after their
toleration (300 s by default), and an evicted peer ends after its grace period. Counted
at once, a node's loss or an eviction would spend the failure budget, and a job could
fail of spot reclaims. So the group waits:

- for a peer being deleted, or on a node that is not ready or gone, until it ends: its
  disruption then wins (decide.budgets.preemption_wins), and its pod must be gone anyway
  before a new group may write the checkpoint directory;
- for a peer running on a ready node, up to PEER_GRACE_SECONDS from the failure; then
  the failure counts, and the peer is deleted with the group.

A failure no peer's loss explains (the worker ran out of memory) counts at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api import status as st
from .classify import (
    TERMINATING_ON_UNREACHABLE_NODE,
    Classification,
    Outcome,
    deletion_due,
    node_lost,
    node_unreachable,
    trainer_termination,
)
from .patch import Draft
from .slot import GroupResult

Obj = dict[str, Any]

PEER_GRACE_SECONDS = 90.0
"""How long a failed worker's group waits for a peer still running on a ready node: over
the node controller's default grace period (50 s), so a crashed node shows as not ready
within it."""
PEER_LOST = "PeerLostPending"
"""Reason while a failed worker's peer is being lost (deleted, or its node not ready)."""
PEER_RUNNING = "PeerStillRunning"
"""Reason while a failed worker's peer still runs on a ready node."""


def wait_for_peers(
    draft: Draft, outcomes: Mapping[str, Classification], current: Mapping[str, Obj]
) -> GroupResult | None:
    """The group's wait before its failure is counted, or None: count it now."""
    failed = sorted(n for n, c in outcomes.items() if c.outcome == Outcome.FAILED)
    if len(outcomes) < 2 or not failed:
        return None
    if any(outcomes[n].out_of_memory for n in failed):
        return None
    open_ = [n for n, c in outcomes.items() if not c.ended and n in current]
    lost = [n for n in open_ if _being_lost(draft, outcomes[n], current[n])]
    who = ", ".join(failed)
    # a failed pod gone since is read from its last version seen
    seen = [current.get(n) or draft.seen.last_seen.get(n) for n in failed]
    ended = [t for pod in seen if (t := _finished_at(pod)) is not None]
    if lost:
        text = (f"{who} failed while {', '.join(lost)} is being lost (deleted, or its node "
                "not ready): waiting for its end before counting")  # fmt: skip
        advice = [outcomes[n].message for n in lost
                  if outcomes[n].reason == TERMINATING_ON_UNREACHABLE_NODE]  # fmt: skip
        text += f"; {advice[0]}" if advice else ""
        # the stall rules judge from the failure, else from when the lost peer was due
        since = st.rfc3339(min(ended)) if ended else deletion_due([current[n] for n in lost])
        return GroupResult("terminating", PEER_LOST, text, text, since=since)
    running = [n for n in open_ if outcomes[n].outcome == Outcome.RUNNING]
    if not running or not ended:
        return None
    left = min(PEER_GRACE_SECONDS, PEER_GRACE_SECONDS - (draft.now - max(ended)).total_seconds())
    if left <= 0:
        return None
    draft.decision.wake_within(left)
    text = (f"{who} failed; waiting up to {left:.0f} s for {', '.join(running)} before "
            "counting (a peer lost with its node shows once the node is not ready)")  # fmt: skip
    # bounded by its own deadline, after which the failure counts: no stall to judge
    return GroupResult("terminating", PEER_RUNNING, text, text, judged=False)


def _being_lost(draft: Draft, outcome: Classification, pod: Obj) -> bool:
    """Being deleted, or on a node gone or not ready."""
    if outcome.outcome == Outcome.TERMINATING:
        return True
    node_name = (pod.get("spec") or {}).get("nodeName")
    node = draft.seen.nodes.get(node_name) if node_name else None
    return node_lost(pod, node, node_name in draft.seen.nodes) or node_unreachable(node)


def _finished_at(pod: Obj | None) -> Any:
    term = trainer_termination(pod) if pod is not None else None
    return st.parse_time((term or {}).get("finishedAt"))
