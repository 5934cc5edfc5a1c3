"""Test helper (not a user script): runs the trainer's `run_program` on a volume with a
program that does nothing (`refuse`: its ownership check refuses the volume, as for
another job's search; `full`: the volume refuses the check's write) and writes the
trials completed of every record the reporter published, in order, to
<dir>/published.json."""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path
from typing import Any

from tuneop_contract import EXIT_PREEMPTED
from tuneop_contract.spec import Checkpoint, SpecError
from tuneop_trainer.modes import runner
from tuneop_trainer.report import progress

root, mode = Path(sys.argv[1]), sys.argv[2]
published: list[int] = []
publish = progress.Reporter._publish


def recording(self: progress.Reporter, snapshot: Any, *args: Any, **kwargs: Any) -> None:
    published.append(snapshot.trials_completed)
    publish(self, snapshot, *args, **kwargs)


def check(_root: Path, _write: bool, _wait: float) -> None:
    if mode == "refuse":
        raise SpecError("spec.checkpoint.adopt", "the volume holds another job's search")
    if mode == "full":
        raise OSError(errno.ENOSPC, "No space left on device", str(_root / "fingerprint"))


progress.Reporter._publish = recording  # type: ignore[method-assign]
program = runner.Program(name="first_reports", execute=lambda rt: (EXIT_PREEMPTED, ""), check=check)
code = runner.run_program(program, root, Checkpoint(), False, "Auto")
(root / "published.json").write_text(json.dumps(published))
sys.exit(code)
