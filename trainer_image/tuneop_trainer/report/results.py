"""results.json (every trial: hyperparameters, score, status) and the best-model export."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tuneop_contract import (
    BEST_MODEL_FILE,
    RESULTS_FILE,
    FinalSummary,
    rank_trials,
    write_atomic,
    write_termination_message,
)

from ..checkpoint import weights_digest
from ..parallel import config_oracle, local_oracle

log = logging.getLogger(__name__)


def collect(tuner: Any) -> dict[str, Any]:
    oracle = tuner.oracle
    trials = []
    for trial_id in sorted(oracle.trials):
        trial = oracle.trials[trial_id]
        values = trial.hyperparameters.values
        trials.append(
            {
                "trialId": str(trial_id),
                "status": str(trial.status),
                "score": None if trial.score is None else float(trial.score),
                "bestStep": trial.best_step,
                "hyperparameters": _user_values(values),
                "continuesTrial": values.get("tuner/trial_id"),
            }
        )
    # No trial scored (all failed or invalid): no best, as keras-tuner has none.
    best = [t for t in oracle.get_best_trials(1) if t.score is not None]
    objective = oracle.objective
    return {
        "objective": {"name": objective.name, "direction": objective.direction},
        "trials": trials,
        "best": None
        if not best
        else {
            "trialId": str(best[0].trial_id),
            "score": float(best[0].score),
            "hyperparameters": _user_values(best[0].hyperparameters.values),
        },
    }


def export(tuner: Any, checkpoint_dir: Path, write: bool, strategy: Any) -> dict[str, Any]:
    """Write results.json and best_model.keras (built/restored inside the strategy scope)."""
    results = collect(tuner)
    if results["best"] is not None:
        best_trial = tuner.oracle.get_trial(results["best"]["trialId"])
        model = tuner.load_model(best_trial)
        results["best"]["weightsSha256"] = weights_digest(model)
        path = checkpoint_dir / BEST_MODEL_FILE
        # Non-chief workers save too, to a scratch directory (the standard multi-worker
        # pattern: every worker runs the same ops, only the chief's file is kept).
        scratch = None if write else Path(tempfile.mkdtemp(prefix="tuneop-scratch-"))
        tmp = (scratch or path.parent) / f".{path.name}.tmp.keras"
        with strategy.scope():
            model.save(tmp)
        if scratch is None:
            tmp.replace(path)
            results["best"]["model"] = BEST_MODEL_FILE
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    if write:
        write_atomic(checkpoint_dir / RESULTS_FILE, json.dumps(results, indent=2).encode())
    return results


def write_final_summary(results: dict[str, Any], trials_total: int | None, path: str) -> None:
    """The termination message of a completed search: the final counts and best trial
    from the results (what results.json holds), so the operator's final status is right
    even if the last progress reports never reached the API server."""
    best = results.get("best") or {}
    summary = FinalSummary(
        trials_completed=sum(1 for t in results.get("trials") or [] if t["status"] == "COMPLETED"),
        trials_total=trials_total,
        best_trial_id=best.get("trialId"),
        best_score=best.get("score"),
        best_hyperparameters=best.get("hyperparameters"),
        top_trials=rank_trials(
            results.get("trials") or [], (results.get("objective") or {}).get("direction")
        ),
    )
    write_termination_message(summary.to_message(), path)


def search_progress(oracle: Any) -> dict[str, Any]:
    """Progress fields from an oracle with trials: trials completed and planned, the
    best so far. Empty for a trial group's client (it has no trials; with parallel
    trials the oracle's own record carries them)."""
    planned = planned_trials(config_oracle(oracle))
    local = local_oracle(oracle)
    if local is None:
        return {"trials_total": planned}
    done = sum(1 for t in local.trials.values() if t.status == "COMPLETED")
    fields: dict[str, Any] = {
        "trials_completed": done,
        "trials_total": planned,
        "top_trials": rank_trials(
            (
                {
                    "trialId": str(t.trial_id),
                    "status": str(t.status),
                    "score": t.score,
                    "hyperparameters": _user_values(t.hyperparameters.values),
                }
                for _, t in sorted(local.trials.items())
            ),
            local.objective.direction,
        ),
    }
    best = local.get_best_trials(1)
    if best and best[0].score is not None:
        fields.update(
            best_trial_id=str(best[0].trial_id),
            best_score=float(best[0].score),
            best_hyperparameters=_user_values(best[0].hyperparameters.values),
        )
    return fields


def _user_values(values: dict[str, Any]) -> dict[str, Any]:
    """Hyperparameter values without keras-tuner's own `tuner/...` bookkeeping."""
    return {k: v for k, v in values.items() if not k.startswith("tuner/")}


def planned_trials(oracle: Any) -> int | None:
    """How many trials the oracle will run: `max_trials`, or for Hyperband the size of
    its brackets (keras-tuner 1.4.8 HyperbandOracle: _get_num_brackets / _get_size) per
    iteration. None when unknown (e.g. a grid without max_trials)."""
    import math

    if hasattr(oracle, "hyperband_iterations") and hasattr(oracle, "factor"):
        max_epochs, factor = int(oracle.max_epochs), int(oracle.factor)
        brackets, epochs = 0, float(max_epochs)
        while epochs >= 1:
            epochs /= factor
            brackets += 1
        end_size = math.ceil(1 + math.log(max_epochs, factor))
        total = sum(
            math.ceil(end_size / (b + 1) * factor ** (b - r))
            for b in range(brackets)
            for r in range(b + 1)
        )
        return int(total * int(oracle.hyperband_iterations))
    max_trials = getattr(oracle, "max_trials", None)
    return int(max_trials) if max_trials else None
