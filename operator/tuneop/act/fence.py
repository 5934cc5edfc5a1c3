"""A pass that read the cluster before its process was frozen does not act on that view.

A replica paused long enough (SIGSTOP, a suspended VM, CPU starvation) loses its peering
record and a standby takes over; resumed, the paused replica's reconcile thread carries
on with what it read before the pause. The API server refuses its stale status patch
(resourceVersion) and its pod deletes (uid), but not everything it might do first
(re-creating a child ConfigMap, creating a pod). So every write first asks the Fence:
if the event loop's ticker saw a gap longer than `gap` seconds since this thread's pass
began, or has not ticked for that long now, the process was frozen meanwhile and the
write raises Frozen; the next pass re-reads. A slow API call does not trip it (the loop
keeps ticking); a pass abandoned this way has written nothing after the freeze.

The status patch is the pass's commit point: once the API server has accepted it (the
job unchanged since the pass read it), the rest of the decision (uid-fenced pod
deletes, Kueue releases, the Events saying what was decided) is carried out even if a
freeze comes in between (`committed()`): dropping it would lose the record of a
decision that took effect.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

TICK_SECONDS = 0.5
FREEZE_SECONDS = 2.0
"""A ticker gap this long means the process did not run: well under the time a standby
needs to take over (kopf's peering: at least 5 s after the last keep-alive)."""


class Frozen(Exception):
    """This process was frozen after the pass read: its view may be stale."""


class Fence:
    def __init__(
        self, gap: float = FREEZE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.gap = gap
        self._clock = clock
        self._last_tick = clock()
        self._resumed = float("-inf")
        self._local = threading.local()

    def tick(self) -> None:
        """Called every TICK_SECONDS from the event loop (run())."""
        now = self._clock()
        if now - self._last_tick > self.gap:
            self._resumed = now
        self._last_tick = now

    async def run(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(TICK_SECONDS)

    def begin(self) -> None:
        """A pass starts reading on this thread."""
        self._local.start = self._clock()

    def committed(self) -> None:
        """This thread's pass had its status patch accepted: no more checks for it."""
        self._local.start = None

    def end(self) -> None:
        """This thread's pass is over: the thread may serve other work next (kopf's
        handler threads), which began no pass and is not checked."""
        self._local.start = None

    def check(self) -> None:
        """Before a write on this thread: raise Frozen if the process was frozen since
        the pass began (a thread that began no pass is not checked)."""
        start = getattr(self._local, "start", None)
        if start is None:
            return
        now = self._clock()
        if now - self._last_tick > self.gap or self._resumed > start:
            raise Frozen(
                f"the operator did not run for over {self.gap:.0f} s after this pass read "
                "the cluster; its writes are dropped and the next pass re-reads"
            )
