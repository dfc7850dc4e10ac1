"""A second look at the seeds, with the error rate spent across the looks (group-sequential testing).

A claim still inconclusive after the first stage's seeds may get a second stage (e.g. 5 then 10 seeds) only when it
was pre-registered (:data:`SECOND_LOOK`, docs/preregistration.md), never because of the first stage's result. The
two-sided ``alpha`` is spent across the looks by a Lan-DeMets spending function (Lan and DeMets 1983) of the
information fraction ``t`` (here seeds so far over the last look's seeds):

* O'Brien-Fleming type: ``alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))`` (almost nothing at an early look);
* Pocock type: ``alpha(t) = alpha ln(1 + (e - 1) t)`` (about evenly spent).

:func:`spending_bounds` turns the spent alpha into the z boundaries of each look, with the looks' statistics
jointly normal (``corr(Z_i, Z_j) = sqrt(t_i / t_j)``); :func:`constant_bounds` gives the classical boundaries of a
shape (Pocock 1977: one constant; O'Brien and Fleming 1979: ``c sqrt(t_K / t_k)``). A look's t test then decides at
the nominal two-sided level of its boundary (:func:`nominal_levels`, :func:`level_for`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

SPENDING: tuple[str, ...] = ("obrien-fleming", "pocock")


@dataclass(frozen=True)
class Looks:
    """A pre-registered group-sequential design: the seeds at each look (increasing) and the spending function."""

    seeds: tuple[int, ...]
    spending: str = "obrien-fleming"

    def __post_init__(self) -> None:
        if self.spending not in SPENDING:
            raise ValueError(f"Looks.spending: unknown {self.spending!r}; valid: {', '.join(SPENDING)}")
        if (
            len(self.seeds) < 1
            or any(b <= a for a, b in zip(self.seeds, self.seeds[1:]))
            or self.seeds[0] < 2
        ):
            raise ValueError(f"Looks.seeds: increasing seed counts of at least 2, got {self.seeds}")

    @property
    def fractions(self) -> tuple[float, ...]:
        return tuple(n / self.seeds[-1] for n in self.seeds)


# The second look of this study: none (docs/preregistration.md). ``Looks((5, 10))`` would be 5 then 10 seeds.
SECOND_LOOK: Looks | None = None


def spent(t: float, alpha: float, spending: str) -> float:
    """The two-sided alpha spent up to information fraction ``t`` (module docstring)."""
    from scipy.stats import norm

    if not 0.0 < t <= 1.0:
        raise ValueError(f"information fraction must lie in (0, 1], got {t}")
    if spending == "obrien-fleming":
        return float(2.0 - 2.0 * norm.cdf(norm.ppf(1.0 - alpha / 2.0) / math.sqrt(t)))
    if spending == "pocock":
        return float(alpha * math.log(1.0 + (math.e - 1.0) * t))
    raise ValueError(f"unknown spending function {spending!r}; valid: {', '.join(SPENDING)}")


def _inside(bounds: Sequence[float], fractions: Sequence[float]) -> float:
    """``P(|Z_k| < b_k for every look k)`` under H0, the looks' statistics jointly normal."""
    import numpy as np
    from scipy.stats import multivariate_normal

    k = len(bounds)
    if k == 1:
        from scipy.stats import norm

        return float(2.0 * norm.cdf(bounds[0]) - 1.0)
    t = np.asarray(fractions, dtype=float)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    b = np.asarray(bounds, dtype=float)
    dist = multivariate_normal(mean=np.zeros(k), cov=cov, abseps=1e-7, releps=1e-7, maxpts=200_000 * k)
    return float(dist.cdf(b, lower_limit=-b))


def spending_bounds(
    fractions: Sequence[float], alpha: float = 0.05, spending: str = "obrien-fleming"
) -> list[float]:
    """The two-sided z boundary of each look at ``fractions`` (increasing, the last 1) that spends ``alpha`` by the
    spending function: look k rejects when ``|Z_k| >= b_k``, having spent ``alpha(t_k) - alpha(t_{k-1})`` there."""
    from scipy.optimize import brentq

    bounds: list[float] = []
    for k, t in enumerate(fractions):
        target = 1.0 - spent(t, alpha, spending)  # P(no rejection up to look k)
        low = _inside(bounds, fractions[:k]) if bounds else 1.0
        if target >= low:  # nothing left to spend at this look
            bounds.append(math.inf)
            continue
        so_far, upto = list(bounds), list(fractions[: k + 1])
        bounds.append(brentq(lambda b: _inside([*so_far, b], upto) - target, 0.5, 12.0, xtol=1e-6))  # noqa: B023
    return bounds


def constant_bounds(fractions: Sequence[float], alpha: float = 0.05, shape: str = "pocock") -> list[float]:
    """The classical boundaries of ``shape``: Pocock's one constant ``c`` at every look, O'Brien-Fleming's
    ``c sqrt(1 / t_k)``, with ``c`` such that the looks together reject with probability ``alpha`` under H0."""
    from scipy.optimize import brentq

    if shape not in SPENDING:
        raise ValueError(f"unknown boundary shape {shape!r}; valid: {', '.join(SPENDING)}")
    scale = [1.0 if shape == "pocock" else math.sqrt(1.0 / t) for t in fractions]
    c = brentq(lambda c: _inside([c * s for s in scale], fractions) - (1.0 - alpha), 1.0, 8.0, xtol=1e-6)
    return [c * s for s in scale]


def nominal_levels(looks: Looks, alpha: float = 0.05) -> list[float]:
    """The nominal two-sided level of each look's test (``2 (1 - Phi(b_k))``, :func:`spending_bounds`)."""
    from scipy.stats import norm

    return [float(2.0 * norm.sf(b)) for b in spending_bounds(looks.fractions, alpha, looks.spending)]


def level_for(seeds: int, alpha: float = 0.05, looks: Looks | None = None) -> float:
    """The two-sided level a claim measured on ``seeds`` seeds is tested at: ``alpha`` without a second look
    (``looks`` None, the default :data:`SECOND_LOOK` of this study); else the nominal level of the last look
    ``seeds`` reaches (a claim short of the first look's seeds is tested at the first look's level)."""
    looks = looks if looks is not None else SECOND_LOOK
    if looks is None:
        return alpha
    levels = nominal_levels(looks, alpha)
    reached = [i for i, n in enumerate(looks.seeds) if seeds >= n]
    return levels[reached[-1] if reached else 0]
