from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dmllab.toys import heated as h


def _naive_gradient(
    f_hat: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Eq. 3 written as loops: alpha * sum_m (p(m|x, alpha) - q(m|x)) w_hat_m."""
    out = torch.zeros_like(f_hat)
    for i in range(f_hat.shape[0]):
        w_hat = [weight[m] / weight[m].norm() for m in range(weight.shape[0])]
        z = [float(f_hat[i] @ w) for w in w_hat]
        zmax = max(z)
        e = [math.exp(alpha * (v - zmax)) for v in z]
        for m, w in enumerate(w_hat):
            p = e[m] / sum(e)
            q = 1.0 if m == int(labels[i]) else 0.0
            out[i] += alpha * (p - q) * w
    return out


@pytest.mark.parametrize("alpha", [0.01, 1.0, 16.0, 300.0])
def test_gradient_autograd_matches_eq3_and_naive(alpha):
    torch.manual_seed(0)
    f_hat = F.normalize(torch.randn(6, 5, dtype=torch.float64), dim=1)
    weight = torch.randn(4, 5, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 3, 1, 0])
    auto = h.feature_gradient(f_hat, labels, weight, alpha)
    analytic = h.feature_gradient_analytic(f_hat, labels, weight, alpha)
    torch.testing.assert_close(auto, analytic)
    torch.testing.assert_close(auto, _naive_gradient(f_hat, labels, weight, alpha))


def test_properties_on_constructed_samples():
    # Two classes on orthogonal axes: a centroid sample sits on its weight, an incorrect one on the other's.
    weight = torch.eye(2, dtype=torch.float64)
    f_hat = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    labels = torch.tensor([0, 0])  # sample 0 correct (centroid), sample 1 incorrect
    small = h.feature_gradient(f_hat, labels, weight, 1e-4).norm(dim=1)
    large = h.feature_gradient(f_hat, labels, weight, 200.0).norm(dim=1)
    assert (small < 1e-3).all()  # Property 1
    assert large[0] < 1e-50  # Property 2, correct: vanishes
    # incorrect sample: the gradient is alpha * ||w_hat_1 - w_hat_0|| = alpha * sqrt(2)
    assert large[1] == pytest.approx(200.0 * math.sqrt(2), rel=1e-6)


def test_cosine_margin_and_groups():
    torch.manual_seed(1)
    f_hat = F.normalize(torch.randn(200, 3), dim=1)
    weight = torch.randn(4, 3)
    labels = torch.randint(0, 4, (200,))
    margin = h.cosine_margin(f_hat, labels, weight)
    z = f_hat @ F.normalize(weight, dim=1).t()
    for i in range(200):
        others = [z[i, m] for m in range(4) if m != labels[i]]
        assert margin[i] == pytest.approx(float(z[i, labels[i]] - max(others)), abs=1e-6)
    groups = h.sample_groups(margin, 0.2)
    assert list(groups) == list(h.GROUPS)
    assert torch.equal(groups["incorrect"], margin <= 0)
    assert not (groups["centroid"] & groups["boundary"]).any()
    assert not ((groups["centroid"] | groups["boundary"]) & groups["incorrect"]).any()
    n_correct = int((margin > 0).sum())
    assert abs(int(groups["boundary"].sum()) - 0.2 * n_correct) <= 2
    assert margin[groups["centroid"]].min() > margin[groups["boundary"]].max()
    with pytest.raises(ValueError, match="group_quantile"):
        h.sample_groups(margin, 0.7)


def test_angular_statistics_known_configuration():
    emb = torch.tensor([[2.0, 0.0], [1.0, 0.0], [0.0, 3.0], [0.0, 1.0]])
    stats = h.angular_statistics(emb, torch.tensor([0, 0, 1, 1]))
    assert stats["intra_angle"] == pytest.approx(0.0, abs=1e-3)
    assert stats["inter_angle"] == pytest.approx(90.0, abs=1e-4)
    norms = torch.tensor([2.0, 1.0, 3.0, 1.0])
    assert stats["norm_cv"] == pytest.approx(float(norms.std() / norms.mean()))


def test_run_heated_gradients_smoke(small_digits):
    rows, _ = h.run_heated_gradients([0.01, 1.0, 100.0], steps=20, data=small_digits)
    sizes = {r["variant"]: r["value"] for r in rows if r["metric"] == "group_size"}
    assert set(sizes) == set(h.GROUPS) and sum(sizes.values()) > 0
    for r in rows:
        if r["metric"] == "grad_norm":
            twin = [
                q["value"]
                for q in rows
                if q["metric"] == "grad_norm_analytic"
                and q["variant"] == r["variant"]
                and q["param_alpha"] == r["param_alpha"]
            ]
            assert twin[0] == pytest.approx(r["value"], rel=1e-4, abs=1e-6)
    with pytest.raises(ValueError, match="split must be"):
        h.run_heated_gradients([1.0], split="val", data=small_digits)


def test_run_heated_embeddings_smoke(small_digits):
    rows, plot = h.run_heated_embeddings(steps=5, data=small_digits)
    assert {r["variant"] for r in rows} == set(h.FIG2_VARIANTS)
    assert {r["metric"] for r in rows} >= {"test_accuracy", "R@1", "intra_inter_ratio", "norm_cv"}
    assert plot["SM"]["emb"].shape == (200, 2) and plot["SM"]["weights"].shape == (10, 2)
    with pytest.raises(ValueError, match="unknown variant"):
        h.train_fig2_variant(
            "BN", *small_digits[:2], num_classes=10, hidden=[4], alpha=4, steps=1, lr=0.1, seed=0
        )
