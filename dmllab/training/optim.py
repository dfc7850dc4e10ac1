"""Optimiser construction: three named parameter groups (backbone / embedding / proxies) with their own lrs.

Without ``optim.lr_proxies`` the proxies train at the embedding layer's lr (``lr_embedding``, which is ``lr``
wherever ``lr_embedding`` is unset): ProxyNCA++ "-fast", "the proxies, the embedding layer, and the backbone
model all share the same learning rate" (Sec. 3.6); ``lr_proxies`` is ProxyNCA++ "+fast" (Table 1's proxy lr,
a multiple of the embedding lr). Where a profile gives the trunk its own lr (the quick profile's small CNN,
:mod:`dmllab.training.presets.proxynca`), "-fast" keeps the proxies with the embedding layer.

The "proxies" group holds *every* learnable parameter of the loss (proxies, a classifier bias, the learnable
beta of the margin loss): a loss parameter left out of the optimiser is the reproduction trap of
Proxy-Anchor-CVPR2020 GitHub issue #25 (official-code.md), so :func:`check_all_params_in_groups` asserts
coverage.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from dmllab.training.config import OptimConfig
from dmllab.training.optimizers import OPTIMIZERS

GROUP_NAMES = ("backbone", "embedding", "proxies")


def param_groups(model: nn.Module, loss: nn.Module, cfg: OptimConfig) -> list[dict]:
    """Parameter groups with ``name`` and ``base_lr`` keys (the schedule multiplies ``base_lr``).

    Args:
        model: an ``EmbeddingNet`` (``.backbone`` and ``.head``).
        loss: the loss module; all of ``loss.parameters()`` go to the "proxies" group, at ``cfg.lr_proxies``
            or else the embedding layer's lr (module docstring).
    """
    embedding = cfg.lr if cfg.lr_embedding is None else cfg.lr_embedding
    lrs = {
        "backbone": cfg.lr,
        "embedding": embedding,
        "proxies": embedding if cfg.lr_proxies is None else cfg.lr_proxies,
    }
    params = {
        "backbone": list(model.backbone.parameters()),
        "embedding": list(model.head.parameters()),
        "proxies": list(loss.parameters()),
    }
    return [
        {"name": name, "params": params[name], "lr": lrs[name], "base_lr": lrs[name]}
        for name in GROUP_NAMES
        if params[name]
    ]


def build_optimizer(groups: list[dict], cfg: OptimConfig, *, fused: bool = False) -> torch.optim.Optimizer:
    """The optimiser ``cfg.name`` of :data:`~dmllab.training.optimizers.OPTIMIZERS` over ``groups`` with ``cfg``'s
    eps, weight decay and momentum; ``fused``: torch's single-kernel variant where it has one (the trainer on
    CUDA, :mod:`dmllab.training.optimizers`). An unknown name raises, listing the valid ones."""
    try:
        factory = OPTIMIZERS.get(cfg.name)
    except KeyError as err:
        raise ValueError(err.args[0]) from None
    return factory(groups, cfg, fused)


def check_all_params_in_groups(optimizer: torch.optim.Optimizer, modules: Iterable[nn.Module]) -> None:
    """Raise RuntimeError naming any parameter of ``modules`` that no optimiser group holds."""
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    missing = [
        f"{type(m).__name__}.{name}" for m in modules for name, p in m.named_parameters() if id(p) not in held
    ]
    if missing:
        raise RuntimeError(f"parameters missing from every optimiser group: {missing}")
