"""Losses for proxy-based deep metric learning: a functional core plus thin modules.

Public names: the proxy losses (:class:`ProxyNCALoss`, :class:`NormSoftmaxLoss`, :class:`SoftmaxLoss`,
:class:`MarginSoftmaxLoss`, :class:`ProxyAnchorLoss`, :class:`HeatedSoftmaxLoss`, :class:`SoftTripleLoss`,
:class:`VirtualSoftmaxLoss`), the wrapper :class:`ProxySynthesis`, the training-step regulariser
:class:`Mixup` (input / manifold mixup), the pytorch-metric-learning pair baselines (:class:`MarginLoss`,
:class:`TripletSemiHardLoss`, :class:`MultiSimilarityLoss`), the registry ``LOSSES`` and the factory
:func:`build_loss` / :func:`list_losses`.

Every registered factory takes ``(num_classes, embedding_dim, **kwargs)``, so a trainer can build any loss
uniformly: ``build_loss("proxynca", num_classes=100, embedding_dim=2048, temperature=1/9)``,
``build_loss("proxy_synthesis", num_classes=100, embedding_dim=512, base="normsoftmax", alpha=0.4, mu=1.0,
temperature=1/23)`` (remaining keywords go to the base loss).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from ..registry import Registry
from . import functional
from .mixup import MIXUP_MODES, Mixup
from .pair import MarginLoss, MultiSimilarityLoss, PairLoss, TripletSemiHardLoss
from .proxy import (
    MARGIN_SOFTMAX_PRESETS,
    PROXY_INITS,
    HeatedSoftmaxLoss,
    MarginSoftmaxLoss,
    NormSoftmaxLoss,
    ProxyAnchorLoss,
    ProxyLoss,
    ProxyNCALoss,
    SoftmaxLoss,
)
from .softtriple import SoftTripleLoss
from .synthesis import COMPOSITIONS, PAIRINGS, ProxySynthesis, sample_beta, synthesis_partners, synthesize
from .virtual_softmax import VirtualSoftmaxLoss

__all__ = [
    "COMPOSITIONS",
    "LOSSES",
    "MIXUP_MODES",
    "PAIRINGS",
    "Mixup",
    "SoftTripleLoss",
    "VirtualSoftmaxLoss",
    "MARGIN_SOFTMAX_PRESETS",
    "PROXY_INITS",
    "HeatedSoftmaxLoss",
    "MarginLoss",
    "MarginSoftmaxLoss",
    "MultiSimilarityLoss",
    "NormSoftmaxLoss",
    "PairLoss",
    "ProxyAnchorLoss",
    "ProxyLoss",
    "ProxyNCALoss",
    "ProxySynthesis",
    "SoftmaxLoss",
    "TripletSemiHardLoss",
    "build_loss",
    "functional",
    "list_losses",
    "sample_beta",
    "synthesis_partners",
    "synthesize",
]

LOSSES: Registry = Registry("loss")
LOSSES.register("proxynca", ProxyNCALoss)
LOSSES.register("normsoftmax", NormSoftmaxLoss)
LOSSES.register("softmax", SoftmaxLoss)
LOSSES.register("margin_softmax", MarginSoftmaxLoss)
for _preset in MARGIN_SOFTMAX_PRESETS:
    LOSSES.register(_preset, partial(MarginSoftmaxLoss.from_preset, _preset))
LOSSES.register("proxy_anchor", ProxyAnchorLoss)
LOSSES.register("heated_softmax", HeatedSoftmaxLoss)
LOSSES.register("softtriple", SoftTripleLoss)
LOSSES.register("virtual_softmax", VirtualSoftmaxLoss)
LOSSES.register("margin", MarginLoss)
LOSSES.register("triplet_semihard", TripletSemiHardLoss)
LOSSES.register("multi_similarity", MultiSimilarityLoss)


def _build_proxy_synthesis(
    num_classes: int,
    embedding_dim: int,
    *,
    base: str = "normsoftmax",
    alpha: float = 0.4,
    mu: float = 1.0,
    generator: torch.Generator | None = None,
    lam: float | None = None,
    pairing: str = "sorted",
    embeddings: str = "both",
    proxies: str = "both",
    **base_kwargs,
) -> ProxySynthesis:
    """``ProxySynthesis(build_loss(base, num_classes, embedding_dim, **base_kwargs), alpha=, mu=, lam=,
    pairing=, embeddings=, proxies=)`` (see :class:`ProxySynthesis` for the options)."""
    if base == "proxy_synthesis":
        raise ValueError("proxy_synthesis cannot wrap itself; choose a proxy loss as base")
    base_loss = build_loss(base, num_classes=num_classes, embedding_dim=embedding_dim, **base_kwargs)
    if not isinstance(base_loss, ProxyLoss):
        valid = [
            n
            for n in LOSSES.names()
            if n != "proxy_synthesis" and getattr(LOSSES.get(n), "has_proxies", True)
        ]
        raise ValueError(
            f"proxy_synthesis needs a proxy loss as base; got {base!r}. Valid bases: {', '.join(valid)}"
        )
    return ProxySynthesis(
        base_loss,
        alpha=alpha,
        mu=mu,
        generator=generator,
        lam=lam,
        pairing=pairing,
        embeddings=embeddings,
        proxies=proxies,
    )


LOSSES.register("proxy_synthesis", _build_proxy_synthesis)


def list_losses() -> list[str]:
    """Names accepted by :func:`build_loss`, sorted."""
    return LOSSES.names()


def build_loss(name: str, **kwargs) -> nn.Module:
    """Build the loss registered as ``name`` with keyword arguments (``num_classes``, ``embedding_dim``, ...).

    An unknown name raises a KeyError listing the valid names.
    """
    return LOSSES.get(name)(**kwargs)
