"""The heap trimmer (tuneop.run.heap): what a burst freed goes back to the system."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tuneop.run import heap


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_trim_gives_back_the_free_pages_a_burst_left_inside_the_heap():
    release = heap.trimmer()
    assert release is not None  # glibc here
    # a burst of 8-KiB blocks (below the mmap threshold: they live in the heap), every
    # 64th kept: the keepers pin the heap's top, so free() alone returns nothing
    burst = [bytearray(8192) for _ in range(40_000)]
    kept = burst[::64]
    del burst
    before = rss_mib()
    release()
    assert rss_mib() < before - 100, "the trim released less than 100 MiB of ~300 MiB free"
    assert len(kept) == 625


def test_where_the_c_library_is_not_glibc_there_is_no_trimmer():
    assert heap.trimmer("libc.musl-x86_64.so.1") is None


def test_the_trimmer_runs_again_and_again_until_cancelled():
    calls: list[int] = []

    async def run() -> int:
        task = asyncio.create_task(heap.trim_periodically(lambda: calls.append(1), 0.01))
        for _ in range(500):  # up to 5 s on a loaded machine
            if len(calls) >= 3:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.05)
        return len(calls)

    at_cancel = asyncio.run(run())
    assert at_cancel >= 3
    assert len(calls) <= at_cancel + 1  # at most the trim already on its way
