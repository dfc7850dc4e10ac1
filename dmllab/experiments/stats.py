"""Verdicts that respect seed noise: a claim holds only when its effect's interval over seeds excludes zero.

The effect of a claim is measured once per seed (paired: both arms of a comparison share the seed, so the seed's
own luck cancels). Its 95% interval is Student's t interval over those per-seed effects,
``mean +- t(0.975, n - 1) * sd / sqrt(n)``. :func:`one_sided_p` is the one-sided t test of the mean against a
bound (the distribution of the interval) and :func:`tost_p` the two one-sided tests of equivalence (TOST,
Schuirmann 1987): below :data:`ALPHA_PER_SIDE` exactly when the 95% interval lies inside ``(-delta, +delta)``.
:func:`holm` (Holm 1979, step-down) and :func:`benjamini_hochberg` (Benjamini and Hochberg 1995, step-up) adjust a
family of p-values for multiplicity. :func:`power` is the power of the two-sided t test from the noncentral t
distribution and :func:`seeds_needed` the fewest seeds that reach a target power.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
ALPHA_PER_SIDE = (1.0 - CONFIDENCE) / 2.0  # every one-sided test (docs/preregistration.md): 0.025
MIN_SEEDS = 2  # an interval needs two values


@dataclass(frozen=True)
class Interval:
    """Mean effect over ``n`` seeds and its two-sided t interval ``[low, high]`` (NaN when ``n < 2``)."""

    mean: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        if self.n < MIN_SEEDS:
            return f"{self.mean:+.2f} (n={self.n}, no interval)"
        return f"{self.mean:+.2f} [{self.low:+.2f}, {self.high:+.2f}] (n={self.n})"


def sd(effects: Sequence[float]) -> float:
    """The sample standard deviation (``n - 1``) of ``effects``; NaN with fewer than two."""
    values = [float(v) for v in effects]
    if len(values) < MIN_SEEDS:
        return math.nan
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def interval(effects: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Student's t interval of the mean of ``effects`` (one value per seed).

    Raises:
        ValueError: no effects, or a non-finite one.
    """
    from scipy.stats import t

    values = [float(v) for v in effects]
    if not values:
        raise ValueError("interval of no effects: the claim's rows gave no per-seed effect")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"non-finite per-seed effect in {values}")
    n = len(values)
    mean = sum(values) / n
    if n < MIN_SEEDS:
        return Interval(mean, math.nan, math.nan, n)
    half = float(t.ppf(0.5 + confidence / 2, n - 1)) * sd(values) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def one_sided_p(effects: Sequence[float], bound: float = 0.0, *, greater: bool = True) -> float:
    """One-sided p-value of the one-sample t test of ``effects`` against ``bound``: of ``H0: mean <= bound``
    (``greater``) or ``H0: mean >= bound``. NaN with fewer than :data:`MIN_SEEDS` effects; with zero spread, 0 when
    the mean lies strictly on the alternative's side, else 1 (:func:`interval`'s errors)."""
    iv = interval(effects)
    if iv.n < MIN_SEEDS:
        return math.nan
    spread = sd(effects)
    beyond = iv.mean - bound if greater else bound - iv.mean
    if spread == 0.0:
        return 0.0 if beyond > 0 else 1.0
    from scipy.stats import t

    return float(t.sf(beyond / (spread / math.sqrt(iv.n)), iv.n - 1))


def tost_p(effects: Sequence[float], delta: float) -> float:
    """The p-value of the two one-sided tests of equivalence within ``(-delta, +delta)``: the larger of the p-values
    of ``H0: mean <= -delta`` and ``H0: mean >= delta`` (:func:`one_sided_p`); 1 for ``delta <= 0``, NaN with fewer
    than :data:`MIN_SEEDS` effects."""
    if not delta > 0:
        return 1.0
    return max(one_sided_p(effects, -delta, greater=True), one_sided_p(effects, delta, greater=False))


def power(effect: float, sd: float, n: int, level: float = 1.0 - CONFIDENCE) -> float:
    """Power of the two-sided one-sample t test at ``level`` with ``n`` seeds when the true mean effect is
    ``effect`` and the per-seed sd is ``sd``: ``P(|T| > t(1 - level/2, n-1))`` for ``T`` noncentral t with
    ``n - 1`` degrees of freedom and noncentrality ``effect / (sd / sqrt(n))``.

    Raises:
        ValueError: ``n`` below :data:`MIN_SEEDS` or a negative ``sd``.
    """
    from scipy.stats import nct
    from scipy.stats import t as student

    if n < MIN_SEEDS or sd < 0:
        raise ValueError(f"power needs n >= {MIN_SEEDS} and sd >= 0, got n={n}, sd={sd}")
    if sd == 0:
        return 1.0 if effect != 0 else level
    df, nc = n - 1, effect / (sd / math.sqrt(n))
    if abs(nc) > 40.0:  # beyond scipy's noncentral t range (NaN there); the power is 1 to double precision
        return 1.0
    crit = student.ppf(1.0 - level / 2.0, df)
    return float(nct.sf(crit, df, nc) + nct.cdf(-crit, df, nc))


def seeds_needed(
    effect: float, sd: float, target: float = 0.8, level: float = 1.0 - CONFIDENCE, most: int = 1000
) -> int | None:
    """The fewest seeds (at least :data:`MIN_SEEDS`) whose two-sided t test at ``level`` detects a true mean
    ``effect`` with per-seed sd ``sd`` with probability ``target`` (:func:`power`); None when ``most`` seeds do
    not suffice (a zero effect never does)."""
    if not math.isfinite(effect) or not math.isfinite(sd) or effect == 0:
        return None
    low, high = MIN_SEEDS, MIN_SEEDS
    while power(effect, sd, high, level) < target:  # power grows with n: double, then bisect
        if high >= most:
            return None
        low, high = high + 1, min(2 * high, most)
    while low < high:
        mid = (low + high) // 2
        if power(effect, sd, mid, level) >= target:
            high = mid
        else:
            low = mid + 1
    return low


def _checked(pvalues: Sequence[float]) -> list[float]:
    """The p-values as floats; ValueError on a NaN or a value outside [0, 1]."""
    values = [float(p) for p in pvalues]
    if any(not 0.0 <= p <= 1.0 for p in values):  # also rejects NaN
        raise ValueError(f"p-values must lie in [0, 1], got {values}")
    return values


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``m = len(pvalues)`` p-values (Holm 1979), in the input order.

    With the p-values sorted ascending, ``p_(1) <= ... <= p_(m)``, the adjusted ``p~_(i) = max_{j <= i}
    min(1, (m - j + 1) p_(j))``; rejecting where ``p~ < level`` controls the family-wise error rate at ``level``."""
    values = _checked(pvalues)
    m, running = len(values), 0.0
    adjusted = [0.0] * m
    for rank, i in enumerate(sorted(range(m), key=lambda k: values[k])):
        running = max(running, min(1.0, (m - rank) * values[i]))
        adjusted[i] = running
    return adjusted


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values of ``m = len(pvalues)`` p-values (step-up), in the input order.

    With the p-values sorted ascending, ``p~_(i) = min_{j >= i} min(1, m p_(j) / j)``; rejecting where
    ``p~ < q`` controls the false discovery rate at ``q`` (independent or positively dependent tests)."""
    values = _checked(pvalues)
    m, running = len(values), 1.0
    adjusted = [0.0] * m
    order = sorted(range(m), key=lambda k: values[k])
    for rank in range(m - 1, -1, -1):
        running = min(running, min(1.0, m * values[order[rank]] / (rank + 1)))
        adjusted[order[rank]] = running
    return adjusted
