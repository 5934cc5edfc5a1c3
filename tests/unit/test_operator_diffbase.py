"""kopf's diff base is kept nowhere (run/diffbase.py): every object reads as unchanged,
which is right only while no handler reacts to a creation, an update, a resume or a
field change. This fails when one is added, and checks what kopf makes of the storage."""

from __future__ import annotations

import kopf
import tuneop.run.handlers  # noqa: F401  (registers the handlers)
from kopf._core.intents import causes
from tuneop.run.diffbase import NoDiffBase

DIFFLESS = {causes.Reason.DELETE}
"""The only changing reason a handler here may react to (the finalizer, not a diff)."""


def test_no_handler_needs_a_diff():
    registry = kopf.get_default_registry()
    changing = registry._changing.get_all_handlers()
    assert changing, "the deletion handler is registered"
    for handler in changing:
        assert handler.reason in DIFFLESS and handler.field is None, handler


def test_every_object_reads_as_unchanged_and_nothing_is_written():
    storage = NoDiffBase()
    body = kopf.Body({"metadata": {"name": "j", "labels": {"a": "1"}}, "spec": {"x": 1}})
    old, new = storage.fetch(body=body), storage.build(body=body)
    assert old == new == {} and old is not new
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=new)
    assert not patch
    seen = [
        causes.detect_changing_cause(
            finalizer="f", raw_event={"type": None, "object": {}}, body=body,
            old=old, new=new, diff=(), initial=initial, resource=None, logger=None,
            patch=patch, memo=None, indices={},
        ).reason
        for initial in (True, False)
    ]  # fmt: skip
    assert seen == [causes.Reason.RESUME, causes.Reason.NOOP]
