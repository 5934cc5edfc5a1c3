"""`make demo`'s PNG: the objective of each trial over time, the preemption marked.

The demo measures when the pod was lost and when training went on; each trial's score
comes from results.json on the claim and its end from keras-tuner's record of it there
(`trial_<id>/trial.json`, written when the trial ends). matplotlib with the Agg backend:
no display needed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

SIZE_INCHES = (10.0, 5.0)
DPI = 100
OUTAGE_COLOR = "#d62728"
"""The preemption's line (pod lost) and span (lost until the next training step)."""
OUTAGE_WIDTH_POINTS = 3.0
TRIAL_COLOR = "#1f77b4"
BEST_COLOR = "#2ca02c"


@dataclasses.dataclass(frozen=True)
class TrialPoint:
    trial_id: str
    seconds: float
    """When it completed, in seconds since the job was applied."""
    score: float


@dataclasses.dataclass(frozen=True)
class Outage:
    lost: float
    """Seconds since the job was applied when the pod was lost."""
    recovered: float | None
    """When training went on (the next step after the restore); None: not seen."""


@dataclasses.dataclass(frozen=True)
class Rendered:
    path: Path
    width: int
    height: int
    outage_columns: tuple[int, ...]
    """The PNG column (pixels from the left) of each outage's line, where matplotlib
    drew it."""


def trial_points(results: dict[str, Any], ended_at: dict[str, float]) -> list[TrialPoint]:
    """One point per completed trial with a score (results.json's `trials`) whose end
    time is known (`ended_at`: trial id -> seconds since the job was applied)."""
    points = [
        TrialPoint(str(t["trialId"]), ended_at[str(t["trialId"])], float(t["score"]))
        for t in results.get("trials") or []
        if t.get("status") == "COMPLETED"
        and isinstance(t.get("score"), (int, float))
        and str(t["trialId"]) in ended_at
    ]
    return sorted(points, key=lambda p: p.seconds)


def _best_so_far(points: Sequence[TrialPoint], direction: str) -> list[float]:
    pick = max if direction == "max" else min
    best: list[float] = []
    for point in points:
        best.append(point.score if not best else pick(best[-1], point.score))
    return best


def plot(
    points: Sequence[TrialPoint],
    outages: Sequence[Outage],
    path: Path,
    *,
    objective: str,
    direction: str,
    title: str = "",
) -> Rendered:
    """Write the PNG to `path`: each trial's score at its completion time, the best so
    far as a step line, each outage as a vertical line where the pod was lost and a span
    until training went on."""
    fig, ax = plt.subplots(figsize=SIZE_INCHES, dpi=DPI)
    try:
        ordered = sorted(points, key=lambda p: p.seconds)
        xs = [p.seconds for p in ordered]
        ax.scatter(xs, [p.score for p in ordered], color=TRIAL_COLOR, zorder=3, label="trial")
        for point in ordered:
            ax.annotate(
                point.trial_id,
                (point.seconds, point.score),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
        if ordered:
            ax.step(xs, _best_so_far(ordered, direction), where="post", color=BEST_COLOR,
                    label=f"best so far ({direction})")  # fmt: skip
        for i, outage in enumerate(outages):
            # not antialiased: the line's pixels have exactly OUTAGE_COLOR
            ax.axvline(outage.lost, color=OUTAGE_COLOR, linewidth=OUTAGE_WIDTH_POINTS,
                       antialiased=False,
                       label="preemption" if i == 0 else None, zorder=2)  # fmt: skip
            if outage.recovered is not None:
                ax.axvspan(outage.lost, outage.recovered, color=OUTAGE_COLOR, alpha=0.15,
                           label="lost until the next step" if i == 0 else None)  # fmt: skip
        right = max([*xs, *(o.recovered or o.lost for o in outages), 1.0])
        ax.set_xlim(0, right * 1.05)
        ax.set_xlabel("seconds since the job was applied")
        ax.set_ylabel(objective)
        ax.set_title(title or f"{objective} per trial")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        fig.canvas.draw()
        # display x (pixels from the left) is the PNG's column at the same dpi
        columns = tuple(round(float(ax.transData.transform((o.lost, 0))[0])) for o in outages)
        fig.savefig(path, dpi=DPI)
        width, height = fig.canvas.get_width_height()
        return Rendered(path, int(width), int(height), columns)
    finally:
        plt.close(fig)
