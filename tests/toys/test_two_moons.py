from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dmllab.toys import two_moons as tm


def test_data_is_appendix_b():
    x, y = tm.make_two_moons()
    assert x.shape == (600, 2) and y.shape == (600,) and set(np.unique(y)) == {0, 1}
    x2, _ = tm.make_two_moons()
    np.testing.assert_array_equal(x, x2)  # random_state=0 is deterministic


def test_net_is_2_100_relu_2_and_seeded():
    a, b = tm.two_moons_net(3), tm.two_moons_net(3)
    shapes = [tuple(p.shape) for p in a.parameters()]
    assert shapes == [(100, 2), (100,), (2, 100), (2,)]
    assert isinstance(a[1], torch.nn.ReLU)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_tempered_cross_entropy_matches_naive():
    torch.manual_seed(0)
    logits = torch.randn(7, 2, dtype=torch.float64)
    labels = torch.randint(0, 2, (7,))
    for t in (1.0, 0.5, 1 / 16):
        naive = 0.0
        for i in range(7):
            num = math.exp(logits[i, labels[i]].item() / t)
            den = sum(math.exp(logits[i, j].item() / t) for j in range(2))
            naive += -math.log(num / den)
        assert tm.tempered_cross_entropy(logits, labels, t).item() == pytest.approx(naive / 7, rel=1e-10)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        tm.tempered_logits(logits, 0.0)


def test_contour_length_of_circle_and_line():
    g = np.linspace(-2, 2, 401)
    xx, yy = np.meshgrid(g, g)
    radius = np.sqrt(xx**2 + yy**2)
    assert tm.contour_length(g, g, radius, level=1.0) == pytest.approx(2 * math.pi, rel=1e-3)
    assert tm.contour_length(g, g, xx, level=0.5) == pytest.approx(4.0, rel=1e-9)


def test_sign_changes_counts_crossings():
    z = np.zeros((5, 6))
    z[:, 3:] = 1.0  # a vertical step: one crossing per row
    assert tm.sign_changes(z) == 5
    z[2, :] = 1.0  # row 2 all above: 0 in that row; rows 1->2 and 2->3 flip at columns 0..2
    assert tm.sign_changes(z) == 4 + 6


def test_untrained_boundary_is_independent_of_temperature():
    # Same init for every T: dividing the logits by T does not move P = 0.5, so with 0 steps the boundary
    # and the accuracy are identical, while the loss differs.
    rows, plot = tm.run_two_moons([1.0, 0.25], steps=0, grid_resolution=30)
    by = {(r["variant"], r["metric"]): r["value"] for r in rows}
    # (the contour is interpolated linearly between grid values of different sigmoids: equal up to ~1e-4)
    assert by[("T=1", "boundary_length")] == pytest.approx(by[("T=0.25", "boundary_length")], rel=1e-3)
    assert by[("T=1", "boundary_sign_changes")] == by[("T=0.25", "boundary_sign_changes")]
    assert by[("T=1", "train_accuracy")] == by[("T=0.25", "train_accuracy")]
    assert by[("T=1", "train_loss")] != by[("T=0.25", "train_loss")]
    assert set(plot["prob"]) == {1.0, 0.25} and plot["prob"][1.0].shape == (30, 30)


def test_run_rows_schema():
    rows, _ = tm.run_two_moons([1.0, 0.125], steps=20, grid_resolution=20)
    metrics = {r["metric"] for r in rows}
    assert metrics == {
        "train_accuracy",
        "train_loss",
        "train_nll_t1",
        "boundary_length",
        "boundary_sign_changes",
    }
    for r in rows:
        assert r["dataset"] == "two_moons" and r["param_steps"] == 20 and math.isfinite(r["value"])
    with pytest.raises(ValueError, match="at least one temperature"):
        tm.run_two_moons([])
