"""Heated-up Table 5: HeatedSoftmaxLoss(learn_alpha=True) learns alpha; heating scales and freezes it."""

from __future__ import annotations

import pytest
import torch

from dmllab.losses import HeatedSoftmaxLoss, build_loss


def test_fixed_alpha_is_a_plain_value() -> None:
    loss = HeatedSoftmaxLoss(3, 4, alpha=16.0)
    assert loss.alpha == 16.0 and not loss.learn_alpha
    assert (
        all(p is not None for p in loss.parameters()) and len(list(loss.parameters())) == 2
    )  # proxies, bias
    loss.alpha = 4.0
    assert loss.alpha == 4.0


def test_learned_alpha_gets_a_gradient_and_moves() -> None:
    torch.manual_seed(0)
    loss = build_loss("heated_softmax", num_classes=3, embedding_dim=4, alpha=2.0, learn_alpha=True)
    assert loss.alpha == pytest.approx(2.0)
    labels = torch.arange(12) % 3
    emb = torch.nn.functional.normalize(torch.eye(4)[labels] + 0.1 * torch.randn(12, 4), dim=1)  # separable
    opt = torch.optim.SGD(loss.parameters(), lr=0.5)
    for _ in range(200):
        opt.zero_grad()
        loss(emb, labels).backward()
        assert loss.alpha_param.grad is not None
        opt.step()
    # the proxies align with the (separable) samples, then a larger scale lowers the cross-entropy
    assert loss.alpha > 2.0


def test_heating_scales_the_learned_alpha_and_freezes_it() -> None:
    loss = HeatedSoftmaxLoss(3, 4, alpha=16.0, learn_alpha=True)
    with torch.no_grad():
        loss.alpha_param.fill_(20.0)  # as if learned
    loss.alpha = 16.0  # the trainer before heating: factor 1
    assert loss.alpha == pytest.approx(20.0)
    loss.alpha = 4.0  # heating: alpha_init / 4
    assert loss.alpha == pytest.approx(5.0)
    emb, labels = torch.nn.functional.normalize(torch.randn(6, 4), dim=1), torch.arange(6) % 3
    loss(emb, labels).backward()
    assert loss.alpha_param.grad is None  # frozen once heated
    naive = torch.nn.functional.cross_entropy(
        5.0 * emb @ torch.nn.functional.normalize(loss.proxies, dim=1).t() + loss.bias, labels
    )
    assert float(loss(emb, labels).detach()) == pytest.approx(float(naive.detach()), rel=1e-5)
    assert "heat_factor" in loss.state_dict() and "alpha_param" in loss.state_dict()
