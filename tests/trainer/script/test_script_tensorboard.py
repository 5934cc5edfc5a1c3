"""TensorBoard under exec (tests/trainer/scripts/tensorboard_search.py, written like the
keras.io guide "Visualize the hyperparameter tuning process"): the logs land on the
checkpoint volume behind the log_dir the script names, with keras-tuner's per-trial
directories and HParams; plain Keras writes the same runs, tags and steps; and a run
killed in a trial, between trials and in the final fit shows every step once, with the
uninterrupted run's values, bit for bit."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import SCRIPTS, env, events, once_each, signal_when, start_exec, trial_fit
from tuneop_contract import ENV_SCRIPT_WORKDIR, EXIT_COMPLETED, EXIT_PREEMPTED, OUTPUTS_DIR

from tests.checkpoints import committed
from tests.forkserver import launch

SCRIPT = SCRIPTS / "tensorboard_search.py"

pytestmark = pytest.mark.slow


def shape(runs: dict[str, list[tuple[str, int, Any]]]) -> dict[str, Counter[tuple[str, int]]]:
    return {run: Counter((tag, step) for tag, step, _ in items) for run, items in runs.items()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The uninterrupted exec run's working directory, and the plain run's (no tuneop),
    run side by side."""
    ref, plain = tmp_path_factory.mktemp("ref"), tmp_path_factory.mktemp("plain")
    plain_env = {k: v for k, v in env().items() if not k.startswith("TUNEOP_")}
    plain_proc = launch([str(SCRIPT)], plain_env, plain / "log", cwd=plain)
    try:
        proc = start_exec(SCRIPT, ref / "ckpt", ref / "log")
        assert proc.wait(timeout=300) == EXIT_COMPLETED, (ref / "log").read_text()[-3000:]
        assert plain_proc.wait(timeout=300) == 0, (plain / "log").read_text()[-3000:]
    finally:
        if plain_proc.poll() is None:
            plain_proc.kill()
    return ref, plain


def test_logs_are_kept_on_the_volume_as_plain_keras_writes_them(
    reference: tuple[Path, Path],
) -> None:
    ref, plain = reference
    link = ref / "tb_logs"
    assert link.is_symlink() and link.resolve() == (ref / "ckpt/tensorboard/tb_logs").resolve()
    runs = events(ref / "ckpt" / "tensorboard")
    assert shape(runs) == shape(events(plain))  # same runs, tags and steps
    expected = {"tb_logs/0/execution0/train", "tb_logs/1/execution0/validation", "tb_final/train"}
    assert expected <= set(runs), sorted(runs)
    hparams = [tag for tag, _, _ in runs["tb_logs/0/execution0"]]
    assert "_hparams_/session_start_info" in hparams and "_hparams_/session_end_info" in hparams
    assert once_each(runs) == {}  # every step once
    # batch-level summaries every 2 batches, counted over the whole fit (15 steps an epoch)
    steps = [s for tag, s, _ in runs["tb_logs/0/execution0/train"] if tag == "batch_loss"]
    assert steps == list(range(2, 46, 2)), steps
    assert "TB_TRIALS ['0', '1']" in (ref / "log").read_text()


def test_killed_in_and_between_fits_shows_every_step_once(
    reference: tuple[Path, Path], tmp_path: Path
) -> None:
    """Run as in a pod: in its working directory on the volume (TUNEOP_SCRIPT_WORKDIR),
    where its relative log_dir is linked to the volume's tensorboard/ all the same."""
    ref, _ = reference
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    workdir = {ENV_SCRIPT_WORKDIR: str(ckpt / OUTPUTS_DIR)}
    trial_0, final_fit = ckpt / trial_fit("0"), ckpt / "fits" / "fit-0"
    kills = [  # (signal, where): mid-epoch in a trial, in the next trial, the final fit;
        # a SIGKILL once the fit has a checkpoint committed (the resumed run restores it)
        (
            signal.SIGKILL,
            lambda p: p.trial_id == "0" and p.epoch == 1 and p.step >= 5 and committed(trial_0),
        ),
        (signal.SIGTERM, lambda p: p.trial_id == "1" and p.epoch == 0 and p.step >= 7),
        (
            signal.SIGKILL,
            lambda p: (
                p.trial_id == "fit-0" and p.epoch == 1 and p.step >= 4 and committed(final_fit)
            ),
        ),
    ]
    for sig, where in kills:
        code = signal_when(start_exec(SCRIPT, ckpt, log, extra_env=workdir), ckpt, where, sig)
        assert code == (-signal.SIGKILL if sig == signal.SIGKILL else EXIT_PREEMPTED), (
            log.read_text()[-3000:]
        )
    proc = start_exec(SCRIPT, ckpt, log, extra_env=workdir)
    assert proc.wait(timeout=300) == EXIT_COMPLETED, log.read_text()[-3000:]
    assert log.read_text().count("restored ckpt-") >= 3
    assert events(ckpt / "tensorboard") == events(ref / "ckpt" / "tensorboard")
    link = ckpt / OUTPUTS_DIR / "tb_logs"
    assert link.is_symlink() and link.resolve() == (ckpt / "tensorboard/tb_logs").resolve()
    assert not (tmp_path / "tb_logs").exists()  # nothing where the process was started
