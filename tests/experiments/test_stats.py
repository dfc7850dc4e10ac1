"""Seed-interval verdicts: the t interval from its definition, and the three verdicts."""

import math

import pytest
from scipy import stats as sps

from dmllab.experiments import stats


def test_interval_matches_the_t_formula():
    effects = [1.0, 2.0, 4.0]
    iv = stats.interval(effects)
    n, mean = 3, 7 / 3
    sd = math.sqrt(sum((e - mean) ** 2 for e in effects) / (n - 1))
    half = sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    assert iv.mean == pytest.approx(mean)
    assert (iv.low, iv.high) == pytest.approx((mean - half, mean + half))
    assert iv.n == 3


@pytest.mark.parametrize(
    "effects, verdict",
    [
        ([1.0, 1.2, 0.9], "yes"),  # clearly positive
        ([-1.0, -1.2, -0.9], "no"),  # clearly the other way
        ([1.0, -1.0, 0.5], "inconclusive"),  # within noise
        ([3.0, 0.1, -0.2], "inconclusive"),  # positive mean, but the interval contains 0
        ([5.0], "inconclusive"),  # one seed never decides
        ([0.5, 0.5, 0.5], "yes"),  # deterministic effect
    ],
)
def test_verdicts(effects, verdict):
    assert stats.verdict(stats.interval(effects)) == verdict


def test_bad_effects_raise():
    with pytest.raises(ValueError, match="no effects"):
        stats.interval([])
    with pytest.raises(ValueError, match="non-finite"):
        stats.interval([1.0, float("nan")])
