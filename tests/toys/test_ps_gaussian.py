from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dmllab.losses import NormSoftmaxLoss, ProxySynthesis
from dmllab.toys import ps_gaussian as ps


def test_centres_form_equilateral_triangle():
    c = ps.gaussian_centres(3.0)
    d = [np.linalg.norm(c[i] - c[j]) for i, j in ((0, 1), (0, 2), (1, 2))]
    assert d == pytest.approx([3.0, 3.0, 3.0])


def test_gaussian_toy_statistics():
    x, y = ps.make_gaussian_toy(4000, separation=3.0, std=0.5, seed=1)
    assert x.shape == (12000, 2) and np.bincount(y).tolist() == [4000] * 3
    for k, centre in enumerate(ps.gaussian_centres(3.0)):
        pts = x[y == k]
        np.testing.assert_allclose(pts.mean(0), centre, atol=0.03)
        np.testing.assert_allclose(pts.std(0), [0.5, 0.5], atol=0.02)


def test_transition_fraction_naive():
    p = np.array([0.5, 0.95, 0.89, 0.9, 1.0])
    assert ps.transition_fraction(p, 0.9) == pytest.approx(sum(v < 0.9 for v in p) / len(p))


def test_build_loss():
    assert isinstance(ps.build_loss("normsoftmax", scale=23.0, alpha=0.4, mu=1.0, seed=0), NormSoftmaxLoss)
    wrapped = ps.build_loss("ps+normsoftmax", scale=23.0, alpha=0.4, mu=1.0, seed=0)
    assert isinstance(wrapped, ProxySynthesis) and wrapped.base.temperature == pytest.approx(1 / 23)
    with pytest.raises(ValueError, match="valid: normsoftmax, ps\\+normsoftmax"):
        ps.build_loss("softmax", scale=1.0, alpha=0.4, mu=1.0, seed=0)


def test_confidence_is_softmax_of_cosine_over_t():
    loss = ps.build_loss("normsoftmax", scale=23.0, alpha=0.4, mu=1.0, seed=0)
    emb = torch.randn(5, 2)
    p = ps.confidence(loss, emb)
    u = emb / emb.norm(dim=1, keepdim=True)
    w = loss.proxies / loss.proxies.norm(dim=1, keepdim=True)
    naive = torch.softmax(23.0 * u @ w.t(), dim=1)
    torch.testing.assert_close(p, naive.detach())


def test_run_smoke_rows():
    rows, plot = ps.run_ps_gaussian(n_per_class=30, steps=5, grid_resolution=15)
    assert {r["variant"] for r in rows} == set(ps.METHODS)
    assert {r["metric"] for r in rows} == {
        "train_accuracy",
        "mean_conf_train",
        "mean_conf_unseen",
        "input_transition_fraction",
        "embedding_transition_fraction",
    }
    assert all(math.isfinite(r["value"]) for r in rows)
    for m in ps.METHODS:
        d = plot["methods"][m]
        assert d["input_p_blue"].shape == (15, 15) and d["emb"].shape == (90, 2)
        assert ((d["emb_p_blue"] >= 0) & (d["emb_p_blue"] <= 1)).all()
