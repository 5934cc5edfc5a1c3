"""The PromQL of tuneop's Grafana dashboard (charts/tuneop/dashboards/tuneop.json): each
panel's queries, and Grafana's variables filled in as Prometheus then sees them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "tuneop" / "dashboards" / "tuneop.json"
# Grafana's variables as Prometheus sees them once filled in ("All").
VARIABLES = {
    "${tuningjob:regex}": ".*",
    "$namespace": ".*",
    "$tuningjob": ".*",
    "$__rate_interval": "5m",
}


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The board's panels, those of collapsed rows included."""
    out = []
    for panel in board["panels"]:
        out.append(panel)
        out.extend(panel.get("panels") or [])  # collapsed rows
    return out


def exprs() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of the dashboard."""
    board = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in panels(board)
        for target in panel.get("targets") or []
    ]


def filled(expr: str) -> str:
    """`expr` with Grafana's variables filled in (VARIABLES)."""
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr
