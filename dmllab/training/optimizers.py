"""The optimisers by name (:data:`OPTIMIZERS`, the ``optim.name`` of a config): each builds its torch optimiser over
parameter groups from the optimiser section's lr, eps, weight decay and momentum. The config asks this registry for
the valid names; :func:`dmllab.training.optim.build_optimizer` builds from it.

``fused`` (the trainer on CUDA): torch's single-kernel Adam, AdamW and SGD (RMSprop has none): fewer launches per
step, and a GradScaler hands them its overflow flag on the device instead of reading it on the host. The fused
kernels round differently from the per-tensor ones (CUDA runs only; the CPU keeps the latter).
"""

from __future__ import annotations

from typing import Any

import torch

from dmllab.registry import Registry

#: name -> ``factory(groups, optim_section, fused) -> torch.optim.Optimizer``.
OPTIMIZERS: Registry = Registry("optimiser")


def _fused(fused: bool) -> dict[str, bool]:
    return {"fused": True} if fused else {}


@OPTIMIZERS.register("adam")
def adam(groups: list[dict], o: Any, fused: bool = False) -> torch.optim.Optimizer:
    return torch.optim.Adam(groups, lr=o.lr, eps=o.eps, weight_decay=o.weight_decay, **_fused(fused))


@OPTIMIZERS.register("adamw")
def adamw(groups: list[dict], o: Any, fused: bool = False) -> torch.optim.Optimizer:
    return torch.optim.AdamW(groups, lr=o.lr, eps=o.eps, weight_decay=o.weight_decay, **_fused(fused))


@OPTIMIZERS.register("sgd")
def sgd(groups: list[dict], o: Any, fused: bool = False) -> torch.optim.Optimizer:
    return torch.optim.SGD(groups, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay, **_fused(fused))


@OPTIMIZERS.register("rmsprop")
def rmsprop(groups: list[dict], o: Any, fused: bool = False) -> torch.optim.Optimizer:
    """RMSprop has no fused kernel: the per-tensor one everywhere."""
    return torch.optim.RMSprop(groups, lr=o.lr, eps=o.eps, momentum=o.momentum, weight_decay=o.weight_decay)
