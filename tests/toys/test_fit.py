from __future__ import annotations

import pytest
import torch

from dmllab.toys.fit import accuracy, fit_full_batch, mlp


def test_mlp_shapes_and_layers():
    net = mlp(2, [5, 7], 3)
    assert [type(m).__name__ for m in net] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert net(torch.zeros(4, 2)).shape == (4, 3)


@pytest.mark.parametrize("optimizer,lr", [("adam", 0.05), ("sgd", 0.05)])
def test_fit_full_batch_solves_least_squares(optimizer, lr):
    torch.manual_seed(0)
    x = torch.randn(64, 3)
    w_true = torch.tensor([[1.0], [-2.0], [0.5]])
    y = x @ w_true
    w = torch.nn.Parameter(torch.zeros(3, 1))
    history = fit_full_batch([w], lambda: ((x @ w - y) ** 2).mean(), steps=400, lr=lr, optimizer=optimizer)
    assert len(history) == 400 and history[-1] < 1e-3 * history[0]
    assert torch.allclose(w.detach(), w_true, atol=2e-2)


def test_fit_full_batch_errors():
    w = torch.nn.Parameter(torch.zeros(1))
    with pytest.raises(ValueError, match="valid: adam, sgd"):
        fit_full_batch([w], lambda: w.sum(), steps=1, lr=0.1, optimizer="lbfgs")
    with pytest.raises(FloatingPointError, match="non-finite"):
        fit_full_batch([w], lambda: w.sum() * float("nan"), steps=1, lr=0.1)


def test_accuracy():
    logits = torch.tensor([[2.0, 1.0], [0.0, 1.0], [3.0, -1.0]])
    assert accuracy(logits, torch.tensor([0, 1, 1])) == pytest.approx(2 / 3)
