"""The report's forest plot of a paper's claims (:func:`forest`): one line per claim with its effect and 95%
interval over seeds, the paper's effect as a marker and the verdict as the colour, drawn as inline SVG by the
report's template. Claims whose effects share a unit share an axis (every effect in points of a percent metric is
"points"); a claim in another unit gets its own panel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

COLOURS = {
    "yes": "#1b7f3b",
    "no": "#b22222",
    "equivalent": "#2b6cb0",
    "smaller than the paper": "#d97706",
    "inconclusive": "#6b7280",
    "not testable": "#c0c4cc",
}
WIDTH, LABEL_W, ROW_H, HEAD_H, AXIS_H, PAD = 1140, 520, 15, 18, 22, 14
LABEL_CHARS = 78


@dataclass
class Row:
    y: float
    label: str
    title: str
    colour: str
    verdict: str
    counted: bool
    x_mean: float | None = None
    x_low: float | None = None
    x_high: float | None = None
    x_paper: float | None = None
    clipped: bool = False


@dataclass
class Panel:
    unit: str
    y: float
    zero: float | None
    ticks: list[tuple[float, str]] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    axis_y: float = 0.0


@dataclass
class Forest:
    width: int
    height: float
    x0: float
    x1: float
    panels: list[Panel]
    colours: dict[str, str]


def unit_of(unit: str) -> str:
    """The axis a unit is drawn on: every "... points" effect on one "points" axis."""
    return "points (of a percent metric)" if unit.endswith("points") else (unit or "effect")


def _nice(low: float, high: float, n: int = 6) -> list[float]:
    """Round tick values covering ``[low, high]``."""
    span = high - low
    if span <= 0:
        return [low]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    first = math.ceil(low / step) * step
    return [round(first + i * step, 10) for i in range(int((high - first) / step) + 1)]


def _finite(*values: float) -> list[float]:
    return [float(v) for v in values if v is not None and v == v and math.isfinite(float(v))]


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def forest(frame: pd.DataFrame, labels: dict[str, str]) -> Forest | None:
    """The forest plot of the verdict claims of ``frame`` (one paper's lines of
    :func:`dmllab.experiments.multiplicity.claims_frame`); None without a claim to draw."""
    claims = frame[frame["kind"] == "verdict"]
    if claims.empty:
        return None
    x0, x1 = LABEL_W + 10, WIDTH - 20
    panels, y = [], 0.0
    for unit in dict.fromkeys(unit_of(u) for u in claims["unit"]):
        part = claims[[unit_of(u) == unit for u in claims["unit"]]]
        values = _finite(0.0, *part["effect"], *part["95% low"], *part["95% high"], *part["paper effect"])
        low, high = min(values), max(values)
        if high - low < 1e-9:
            low, high = low - 1.0, high + 1.0
        pad = 0.04 * (high - low)
        low, high = low - pad, high + pad

        def x(v: float, low: float = low, high: float = high) -> float:
            return round(x0 + (x1 - x0) * (v - low) / (high - low), 1)

        panel = Panel(unit, y, x(0.0))
        y += HEAD_H
        for rec in part.to_dict("records"):
            label = f"{labels.get(rec['artifact'], rec['artifact'])}: {rec['claim']}"
            verdict = str(rec["verdict"])
            row = Row(
                y + ROW_H / 2,
                _short(label),
                f"{label} ({verdict})",
                COLOURS.get(verdict, "#6b7280"),
                verdict,
                bool(rec["counted"]),
            )
            if _finite(rec["effect"]):
                row.x_mean = x(rec["effect"])
            if len(_finite(rec["95% low"], rec["95% high"])) == 2:
                row.x_low, row.x_high = x(rec["95% low"]), x(rec["95% high"])
            if _finite(rec["paper effect"]):
                row.x_paper = x(rec["paper effect"])
            panel.rows.append(row)
            y += ROW_H
        panel.axis_y = y + 2
        panel.ticks = [(x(t), f"{t:g}") for t in _nice(low, high)]
        y += AXIS_H + PAD
        panels.append(panel)
    return Forest(WIDTH, y, x0, x1, panels, COLOURS)


def legend(verdicts: Sequence[str]) -> list[tuple[str, str]]:
    """``(verdict, colour)`` of the classes, in the order given."""
    return [(v, COLOURS.get(v, "#6b7280")) for v in verdicts]
