"""How the trainer ends with an error, in both modes: one line on stderr and in the
pod's termination message (the operator surfaces it in the TuningJob's condition), the
exit code telling the operator what happened (tuneop_contract.EXIT_*)."""

from __future__ import annotations

import sys

import tuneop_contract as contract

TERMINATION_MESSAGE_PATH = contract.TERMINATION_MESSAGE_PATH
"""Where the kubelet reads the termination message (tests move it: read at each use)."""


def fail(code: int, message: str) -> int:
    """One line on stderr and in the termination message; returns `code`."""
    line = " ".join(message.split())
    print(f"error: {line}", file=sys.stderr)
    contract.write_termination_message(line, TERMINATION_MESSAGE_PATH)
    return code


def summary(exc: BaseException) -> str:
    """One line for the operator: the error and, when keras-tuner wrapped the user's
    traceback into it ("Number of consecutive failures exceeded..."), the user's error
    (the traceback's last line)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    message = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    if len(lines) > 1:
        message += f" {lines[-1]}"
    return message[:1000]
