"""What a claim's effect is compared with: the paper's own effect (:func:`paper_effect`, from the printed cells of
``results/reference/`` or a number the paper states), the bound "smaller than the paper" tests on the profiles
that test it (:func:`smaller_bound`), the yardstick the seeds-for-the-paper's-effect column is powered for
(:func:`yardstick`) and the equivalence margin (:func:`margin`). The rules: docs/preregistration.md; definitions:
:mod:`dmllab.experiments.verdicts`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from dmllab.experiments.artifact import REFERENCE_PAPER, Claim, PaperEffect, Printed, Smallest

if TYPE_CHECKING:
    import pandas as pd

# Pre-registered (docs/preregistration.md): the equivalence margin of an effect in points of a percent metric, on
# every profile, and the profiles on which "smaller than the paper" is tested.
DELTA_POINTS = 1.0
SMALLER_PROFILES: tuple[str, ...] = ("paper",)


def paper_effect(
    claim: Claim, paper: str, reference: pd.DataFrame | None, profile: str | None = None
) -> float:
    """The paper's effect ``claim`` faces on ``profile`` (its ``paper_effect``): a stated number, or its printed
    cells (:class:`~dmllab.experiments.artifact.Printed`, the smallest of several for a set) read from
    ``reference`` (``load_reference()``); NaN where the paper prints none or a cell is missing."""
    return effect_of(claim.paper_effect, paper, reference, profile)


def effect_of(
    printed: PaperEffect, paper: str, reference: pd.DataFrame | None, profile: str | None = None
) -> float:
    """A :data:`~dmllab.experiments.artifact.PaperEffect` as a number (see :func:`paper_effect`)."""
    if isinstance(printed, Mapping):
        return effect_of(printed.get(profile), paper, reference, profile) if profile else math.nan
    if isinstance(printed, Smallest):
        return min(effect_of(o, paper, reference, profile) for o in printed.options)
    if printed is None:
        return math.nan
    if not isinstance(printed, Printed):
        return float(printed)
    if reference is None or paper not in REFERENCE_PAPER:
        return math.nan
    ref = reference[reference["paper"] == REFERENCE_PAPER[paper]]

    def side(cells: tuple[tuple[str, str, str, str], ...]) -> float:
        values = []
        for label, row, column, dataset in cells:
            hit = ref[
                (ref["artifact"] == label)
                & (ref["row"] == row)
                & (ref["column"] == column)
                & (ref["dataset"] == dataset)
            ]
            if hit.empty:
                return math.nan
            values.append(float(hit["value"].iloc[0]))
        return sum(values) / len(values) if values else 0.0

    return side(printed.better) - side(printed.worse)


def yardstick(effect: float, profile: str | None) -> float:
    """The effect the "seeds for the paper's effect" column is powered for: the paper's effect on the paper
    profile, half of it elsewhere (absolute points of the offline benchmark do not transfer)."""
    return effect if profile == "paper" else effect / 2.0


def smaller_bound(effect: float, profile: str | None) -> float:
    """The bound "smaller than the paper" tests the interval against: the paper's effect on the profiles of
    :data:`SMALLER_PROFILES`; NaN (not tested) elsewhere."""
    return effect if profile in SMALLER_PROFILES else math.nan


def margin(claim: Claim, effect: float, profile: str | None) -> float:
    """The equivalence margin ``delta`` of ``claim`` on ``profile``: the claim's own ``margin`` where it states
    one; :data:`DELTA_POINTS` for an effect in points, on every profile; else half the paper's effect on the paper
    profile; NaN (no equivalence test) otherwise."""
    if claim.margin is not None:
        return float(claim.margin)
    if claim.unit.endswith("points"):
        return DELTA_POINTS
    if profile == "paper" and math.isfinite(effect) and effect != 0:
        return abs(effect) / 2.0
    return math.nan
