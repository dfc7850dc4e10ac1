"""The statistics of the verdicts against naive references: the t interval from its definition, TOST against the
two one-sided t tests, power against a simulation and the textbook, Holm and
Benjamini-Hochberg against their definitions."""

import math

import numpy as np
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


def test_bad_effects_raise():
    with pytest.raises(ValueError, match="no effects"):
        stats.interval([])
    with pytest.raises(ValueError, match="non-finite"):
        stats.interval([1.0, float("nan")])


# ------------------------------------------------------------------------- equivalence, power, multiplicity


def _two_one_sided(effects, delta):
    """TOST from its definition: both one-sided t tests (mean > -delta, mean < +delta) reject at 2.5% each."""
    above = sps.ttest_1samp(effects, -delta, alternative="greater").pvalue
    below = sps.ttest_1samp(effects, delta, alternative="less").pvalue
    return above < 0.025 and below < 0.025


def test_equivalence_is_the_two_one_sided_tests():
    rng = np.random.default_rng(0)
    agree = 0
    for _ in range(300):
        n = int(rng.integers(2, 8))
        effects = list(rng.normal(rng.uniform(-1.5, 1.5), rng.uniform(0.1, 1.5), size=n))
        delta = float(rng.uniform(0.2, 2.0))
        equivalent = stats.tost_p(effects, delta) < stats.ALPHA_PER_SIDE
        assert equivalent == _two_one_sided(effects, delta), (effects, delta)
        agree += equivalent
    assert 20 < agree < 280  # both outcomes occur: the comparison can fail


def test_one_sided_and_tost_p_values_are_scipys():
    rng = np.random.default_rng(4)
    for _ in range(50):
        n = int(rng.integers(2, 9))
        effects = list(rng.normal(rng.uniform(-1.0, 1.0), rng.uniform(0.1, 1.0), size=n))
        bound, delta = float(rng.uniform(-1, 1)), float(rng.uniform(0.2, 2.0))
        greater = sps.ttest_1samp(effects, bound, alternative="greater").pvalue
        less = sps.ttest_1samp(effects, bound, alternative="less").pvalue
        assert stats.one_sided_p(effects, bound) == pytest.approx(greater)
        assert stats.one_sided_p(effects, bound, greater=False) == pytest.approx(less)
        tost = max(
            sps.ttest_1samp(effects, -delta, alternative="greater").pvalue,
            sps.ttest_1samp(effects, delta, alternative="less").pvalue,
        )
        assert stats.tost_p(effects, delta) == pytest.approx(tost)
    assert stats.one_sided_p([1.0, 1.0], 0.0) == 0.0 and stats.one_sided_p([1.0, 1.0], 2.0) == 1.0
    assert math.isnan(stats.one_sided_p([1.0], 0.0)) and stats.tost_p([0.1, 0.2], 0.0) == 1.0


def test_power_against_a_simulation():
    rng = np.random.default_rng(1)
    for effect, sd, n in ((0.5, 1.0, 10), (1.0, 2.0, 6), (0.3, 0.5, 20)):
        x = rng.normal(effect, sd, size=(40_000, n))
        t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
        simulated = float((np.abs(t) > sps.t.ppf(0.975, n - 1)).mean())
        assert stats.power(effect, sd, n) == pytest.approx(simulated, abs=0.012)


@pytest.mark.parametrize("d, seeds", [(0.5, 34), (0.8, 15), (1.0, 10)])
def test_seeds_needed_matches_the_textbook(d, seeds):
    """Cohen's d -> n of the two-sided one-sample t test at 5% with 80% power (G*Power's tables)."""
    assert stats.seeds_needed(d, 1.0) == seeds
    assert stats.power(d, 1.0, seeds) >= 0.8 > stats.power(d, 1.0, seeds - 1)
    assert stats.seeds_needed(-d, 1.0) == seeds  # two-sided


def test_seeds_needed_edges():
    assert stats.seeds_needed(0.0, 1.0) is None  # a zero effect is never detected
    assert stats.seeds_needed(0.01, 1.0) is None  # more than 1000 seeds
    assert stats.seeds_needed(1.0, 0.0) == 2
    with pytest.raises(ValueError):
        stats.power(1.0, 1.0, 1)


def _bh_naive(p):
    """Benjamini-Hochberg from its definition: the adjusted p of p_(i) is min over j >= i of m p_(j) / j."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    ranked = [p[i] for i in order]
    adjusted = [min(1.0, min(m * ranked[j] / (j + 1) for j in range(i, m))) for i in range(m)]
    out = [0.0] * m
    for rank, i in enumerate(order):
        out[i] = adjusted[rank]
    return out


def test_benjamini_hochberg_against_its_definition():
    assert stats.benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    rng = np.random.default_rng(2)
    for _ in range(50):
        p = list(rng.uniform(0, 0.2, size=int(rng.integers(1, 12))))
        assert stats.benjamini_hochberg(p) == pytest.approx(_bh_naive(p))
    assert stats.benjamini_hochberg([]) == []
    with pytest.raises(ValueError):
        stats.benjamini_hochberg([0.5, math.nan])


def _holm_naive(p):
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def test_holm_against_its_definition():
    rng = np.random.default_rng(3)
    for _ in range(50):
        p = list(rng.uniform(0, 0.3, size=int(rng.integers(1, 12))))
        assert stats.holm(p) == pytest.approx(_holm_naive(p))
