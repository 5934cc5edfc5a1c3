"""`make demo`'s plot (hack/demo_plot.py): the points come from the search on the claim,
and the PNG matplotlib writes has the preemption where the data puts it (read back from
the file's pixels)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.colors
import matplotlib.image
import numpy as np

from hack import demo_plot as dp

RESULTS = {
    "trials": [
        {"trialId": "0000", "status": "COMPLETED", "score": 0.50},
        {"trialId": "0001", "status": "COMPLETED", "score": 0.75},
        {"trialId": "0002", "status": "FAILED", "score": None},
        {"trialId": "0003", "status": "COMPLETED", "score": 0.60},
    ]
}


def test_each_completed_scored_trial_is_a_point_at_its_end_time():
    ended = {"0000": 14.0, "0001": 5.0, "0002": 9.0, "0003": 20.0}
    assert dp.trial_points(RESULTS, ended) == [
        dp.TrialPoint("0001", 5.0, 0.75),
        dp.TrialPoint("0000", 14.0, 0.50),
        dp.TrialPoint("0003", 20.0, 0.60),  # the failed trial has no point
    ]
    # a trial whose end is not known is left out, not misdated
    assert [p.trial_id for p in dp.trial_points(RESULTS, {"0001": 5.0})] == ["0001"]


def _outage_pixels(path: Path) -> np.ndarray:
    """Boolean mask of the pixels drawn in exactly the outage line's colour."""
    image = matplotlib.image.imread(path)[:, :, :3]
    want = np.array(matplotlib.colors.to_rgb(dp.OUTAGE_COLOR), dtype=image.dtype)
    return np.all(np.abs(image - want) < 1 / 255, axis=2)


def _render(tmp_path: Path, name: str, outages: list[dp.Outage]) -> dp.Rendered:
    points = [dp.TrialPoint(str(i), 10.0 * (i + 1), 0.5 + 0.05 * i) for i in range(6)]
    return dp.plot(points, outages, tmp_path / name, objective="val_accuracy", direction="max")


def test_the_png_marks_the_preemption_where_the_data_puts_it(tmp_path: Path):
    early = _render(tmp_path, "early.png", [dp.Outage(lost=15.0, recovered=22.0)])
    late = _render(tmp_path, "late.png", [dp.Outage(lost=45.0, recovered=52.0)])
    none = _render(tmp_path, "none.png", [])
    for rendered in (early, late, none):
        data = rendered.path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        image = matplotlib.image.imread(rendered.path)
        assert image.shape[:2] == (rendered.height, rendered.width) == (500, 1000)
    assert not _outage_pixels(none.path).any()
    columns = []
    for rendered in (early, late):
        mask = _outage_pixels(rendered.path)
        (column,) = rendered.outage_columns
        # a vertical line at that column, most of the plot's height (the legend's swatch
        # is the only other place with the colour)
        assert mask[:, column - 1 : column + 2].any(axis=1).sum() > 0.6 * rendered.height
        lines = np.flatnonzero(mask.sum(axis=0) > 0.6 * rendered.height)
        half = dp.OUTAGE_WIDTH_POINTS * dp.DPI / 72 / 2 + 1  # the line's half width in pixels
        assert lines.min() >= column - half and lines.max() <= column + half, (lines, column)
        columns.append(column)
    # 30 s later on the same axis (0..63 s over the axes' width) is further right
    assert columns[1] - columns[0] > 0.3 * early.width
