"""Verdicts that respect seed noise: a claim holds only when its effect's interval over seeds excludes zero.

The effect of a claim is measured once per seed (paired: both arms of a comparison share the seed, so the seed's
own luck cancels). Its 95% interval is Student's t interval over those per-seed effects,
``mean +- t(0.975, n - 1) * sd / sqrt(n)``. The verdict is

* **yes**: the interval lies entirely above zero (the effect has the claimed sign and is not seed noise);
* **no**: the interval lies entirely below zero (the opposite of the claim, beyond noise);
* **inconclusive**: the interval contains zero, or fewer than 2 seeds measured it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
MIN_SEEDS = 2  # an interval needs two values; the quick profile runs at least 3 seeds per claim


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


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (scipy)."""
    from scipy.stats import t

    return float(t.ppf(p, df))


def interval(effects: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Student's t interval of the mean of ``effects`` (one value per seed).

    Raises:
        ValueError: no effects, or a non-finite one.
    """
    values = [float(v) for v in effects]
    if not values:
        raise ValueError("interval of no effects: the claim's rows gave no per-seed effect")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"non-finite per-seed effect in {values}")
    n = len(values)
    mean = sum(values) / n
    if n < MIN_SEEDS:
        return Interval(mean, math.nan, math.nan, n)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def verdict(iv: Interval | None) -> str:
    """``yes`` / ``no`` / ``inconclusive`` for a claim whose effect should be positive (module docstring)."""
    if iv is None or iv.n < MIN_SEEDS:
        return "inconclusive"
    if iv.low > 0:
        return "yes"
    if iv.high < 0:
        return "no"
    return "inconclusive"
