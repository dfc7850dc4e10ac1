"""The one optimisation loop of the toy problems: full-batch steps on small in-memory tensors.

The toys train 2-D networks on a few hundred points, where the image trainer of :mod:`dmllab.training`
(datasets, samplers, two-stage protocol) does not apply; every toy uses :func:`fit_full_batch` so that there is
a single loop for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

OPTIMIZERS = ("adam", "sgd")


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int) -> nn.Sequential:
    """Linear -> ReLU blocks for each width in ``hidden``, then a final Linear to ``out_dim`` (no activation)."""
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


def fit_full_batch(
    parameters: Iterable[nn.Parameter],
    objective: Callable[[], torch.Tensor],
    *,
    steps: int,
    lr: float,
    optimizer: str = "adam",
    momentum: float = 0.9,
) -> list[float]:
    """Minimise ``objective()`` (the loss of the whole training set) for ``steps`` optimiser steps.

    Args:
        parameters: the parameters to optimise (model and loss parameters).
        objective: computes the scalar training loss from scratch (called once per step).
        steps: number of steps (>= 0).
        lr: learning rate.
        optimizer: "adam" (torch defaults otherwise) or "sgd" (with ``momentum``).

    Returns the loss before each step (length ``steps``)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    params = list(parameters)
    opt: torch.optim.Optimizer
    if optimizer == "adam":
        opt = torch.optim.Adam(params, lr=lr)
    else:
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum)
    history = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = objective()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite training loss {loss.item()} after {len(history)} steps")
        loss.backward()
        opt.step()
        history.append(float(loss.detach()))
    return history


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of rows whose arg-max equals the label."""
    return float((logits.argmax(dim=1) == labels).float().mean())
