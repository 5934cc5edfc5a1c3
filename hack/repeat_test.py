"""Run one test (or a few) N times, each in a fresh pytest process, and report passes/N.

    make repeat TEST=tests/trainer/script/test_script_tfrecord.py::test_x N=20

What a flaky exactness test looks like only shows over many runs; one green run proves
little. Every failing run's last lines are kept in the report, so the first difference
can be read without running it again. Exit 0 only when every run passed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", nargs="+", help="pytest node ids or paths")
    parser.add_argument("-n", "--runs", type=int, default=20)
    args = parser.parse_args()
    if args.runs < 1:
        print("repeat: --runs must be at least 1", file=sys.stderr)
        return 2
    passes, failures = 0, []
    for run in range(1, args.runs + 1):
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.tests],
            capture_output=True,
            text=True,
        )
        ok = proc.returncode == 0
        passes += ok
        seconds = time.monotonic() - t0
        print(f"run {run}/{args.runs}: {'pass' if ok else 'FAIL'} ({seconds:.0f} s)", flush=True)
        if not ok:
            failures.append((run, "\n".join(proc.stdout.splitlines()[-40:])))
    for run, tail in failures:
        print(f"\n--- run {run} failed; its last lines:\n{tail}")
    print(f"\n{' '.join(args.tests)}: {passes}/{args.runs} passed")
    return 0 if passes == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
