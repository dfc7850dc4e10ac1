"""Group-sequential boundaries against the published values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from dmllab.experiments import sequential


@pytest.mark.parametrize(
    ("looks", "shape", "published"),
    [
        # Jennison and Turnbull (2000), Table 2.1 (Pocock C_P) and 2.3 (O'Brien-Fleming C_B), alpha = 0.05
        (2, "pocock", 2.178),
        (3, "pocock", 2.289),
        (5, "pocock", 2.413),
        (2, "obrien-fleming", 1.977),
        (3, "obrien-fleming", 2.004),
        (5, "obrien-fleming", 2.040),
    ],
)
def test_classical_boundaries_match_the_tables(looks, shape, published):
    fractions = [k / looks for k in range(1, looks + 1)]
    bounds = sequential.constant_bounds(fractions, 0.05, shape)
    assert bounds[-1] == pytest.approx(published, abs=2e-3)


def test_obrien_fleming_spending_at_two_looks():
    """Lan-DeMets O'Brien-Fleming spending, two equally spaced looks: the first boundary is z_0.975 / sqrt(1/2)
    in closed form (2.772); the second lies close to the classical O'Brien-Fleming 1.977."""
    first, second = sequential.spending_bounds([0.5, 1.0], 0.05, "obrien-fleming")
    assert first == pytest.approx(norm.ppf(0.975) / np.sqrt(0.5), abs=1e-4)
    assert second == pytest.approx(1.977, abs=5e-3)


def test_spending_spends_alpha_as_its_function_says():
    """The boundaries spend exactly alpha(t_k) up to look k (a simulation of the looks' joint normal)."""
    rng = np.random.default_rng(0)
    fractions = [0.5, 1.0]
    increments = rng.normal(size=(400_000, 2)) * np.sqrt([0.5, 0.5])
    z = np.cumsum(increments, axis=1) / np.sqrt(fractions)
    for spending in sequential.SPENDING:
        b = sequential.spending_bounds(fractions, 0.05, spending)
        first = np.abs(z[:, 0]) >= b[0]
        either = first | (np.abs(z[:, 1]) >= b[1])
        assert first.mean() == pytest.approx(sequential.spent(0.5, 0.05, spending), abs=1.5e-3)
        assert either.mean() == pytest.approx(0.05, abs=1.5e-3)
    assert sequential.spent(1.0, 0.05, "pocock") == pytest.approx(0.05)
    assert sequential.spent(1.0, 0.05, "obrien-fleming") == pytest.approx(0.05)


def test_no_second_look_is_pre_registered_and_a_look_reads_its_level():
    assert sequential.SECOND_LOOK is None
    assert sequential.level_for(5) == 0.05 and sequential.level_for(10) == 0.05
    looks = sequential.Looks((5, 10), "obrien-fleming")
    first, second = sequential.nominal_levels(looks)
    b1, b2 = sequential.spending_bounds([0.5, 1.0], 0.05, "obrien-fleming")
    assert first == pytest.approx(2 * norm.sf(b1)) and second == pytest.approx(2 * norm.sf(b2))
    assert first < 0.01 < 0.04 < second < 0.05
    assert sequential.level_for(5, looks=looks) == first and sequential.level_for(10, looks=looks) == second
    with pytest.raises(ValueError, match="Looks.spending"):
        sequential.Looks((5, 10), "haybittle")
    with pytest.raises(ValueError, match="Looks.seeds"):
        sequential.Looks((10, 5))
