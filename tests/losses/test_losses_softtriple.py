"""SoftTriple (Qian et al. 2019; PS supplement Eq. ii-iii): naive reference, pytorch-metric-learning, PS wrap."""

from __future__ import annotations

import pytest
import torch
from losses_naive import soft_triple as naive_soft_triple

import dmllab.losses as L
from dmllab.losses import functional as LF

C, K, D = 4, 3, 6


def _batch(seed=0, b=10):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(b, D, generator=g, dtype=torch.float64)
    labels = (torch.arange(b) % C)[torch.randperm(b, generator=g)]
    centers = torch.randn(C * K, D, generator=g, dtype=torch.float64)
    return emb, labels, centers


@pytest.mark.parametrize(
    "kw",
    [
        dict(scale=20.0, gamma=0.1, margin=0.01, tau=0.2),
        dict(scale=5.0, gamma=1.0, margin=0.3, tau=0.0),
        dict(scale=8.0, gamma=0.5, margin=0.0, tau=1.5),
    ],
)
def test_soft_triple_matches_naive_equations(kw):
    emb, labels, centers = _batch(seed=int(kw["scale"]))
    value = LF.soft_triple(emb, labels, centers, centers_per_class=K, **kw)
    assert value.item() == pytest.approx(
        naive_soft_triple(emb, labels, centers, K, **kw), rel=1e-9, abs=1e-12
    )


def test_one_center_and_huge_gamma_limits():
    emb, labels, centers = _batch(seed=3)
    # K = 1: relaxed similarity = cosine; the loss is a margin NormSoftMax with scale 1/T
    one = LF.soft_triple(emb, labels, centers[:C], centers_per_class=1, scale=10.0, margin=0.0, tau=0.0)
    ns = LF.norm_softmax(emb, labels, centers[:C], temperature=0.1)
    torch.testing.assert_close(one, ns)
    assert LF.soft_triple_regularizer(centers[:C], centers_per_class=1).item() == 0.0


def test_regularizer_zero_for_identical_centers_up_to_eps():
    centers = torch.randn(C, D, dtype=torch.float64).repeat_interleave(K, dim=0)  # K equal centres per class
    reg = LF.soft_triple_regularizer(centers, centers_per_class=K, eps=0.0)
    assert reg.item() == pytest.approx(0.0, abs=1e-6)


def test_module_layout_logits_and_validation():
    loss = L.SoftTripleLoss(C, D, centers_per_class=K)
    assert loss.proxies.shape == (C * K, D) and loss.num_classes == C
    emb = torch.randn(5, D)
    assert loss.logits(emb).shape == (5, C)
    with pytest.raises(ValueError, match="labels must be in"):
        loss(emb, torch.tensor([0, 1, 2, 3, C]))
    with pytest.raises(ValueError, match="num_classes \\* 3"):
        loss.loss_from_proxies(emb, torch.zeros(5, dtype=torch.long), torch.randn(C * K + 1, D))
    with pytest.raises(ValueError, match="tau"):
        L.SoftTripleLoss(C, D, tau=-1.0)


def test_matches_pytorch_metric_learning_without_regularizer():
    pml = pytest.importorskip("pytorch_metric_learning.losses")
    torch.manual_seed(0)
    ours = L.SoftTripleLoss(C, D, centers_per_class=K, tau=0.0)
    theirs = pml.SoftTripleLoss(C, D, centers_per_class=K, la=20, gamma=0.1, margin=0.01)
    with torch.no_grad():
        theirs.fc.copy_(ours.proxies.t())  # PML: fc (D, C*K), class-major columns
    emb, labels, _ = _batch(seed=5)
    e1, e2 = emb.float().clone().requires_grad_(True), emb.float().clone().requires_grad_(True)
    v1, v2 = ours(e1, labels), theirs(e2, labels)
    torch.testing.assert_close(v1, v2, rtol=1e-5, atol=1e-5)
    v1.backward()
    v2.backward()
    torch.testing.assert_close(e1.grad, e2.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(ours.proxies.grad, theirs.fc.grad.t(), rtol=1e-4, atol=1e-6)


def test_proxy_synthesis_mixes_centers_blockwise():
    torch.manual_seed(1)
    base = L.SoftTripleLoss(C, D, centers_per_class=K)
    ps = L.ProxySynthesis(base, lam=0.3, mu=1.0)
    emb, labels, _ = _batch(seed=2, b=8)
    emb = emb.float()
    value = ps(emb, labels)
    anchors, partners = ps.last_partners
    # reference: synthetic class k has the K centres 0.3 W_{y_i}^k + 0.7 W_{y_j}^k (normalised space)
    w = torch.nn.functional.normalize(base.proxies.detach(), dim=1).view(C, K, D)
    synth = 0.3 * w[labels[anchors]] + 0.7 * w[labels[partners]]  # (8, K, D)
    e = torch.nn.functional.normalize(emb, dim=1)
    x = torch.cat([e, 0.3 * e[anchors] + 0.7 * e[partners]])
    y = torch.cat([labels, C + torch.arange(8)])
    centers = torch.cat([w, synth]).reshape(-1, D)
    ref = naive_soft_triple(x.double(), y, centers.double(), K, 20.0, 0.1, 0.01, 0.2)
    assert value.item() == pytest.approx(ref, rel=1e-5)
