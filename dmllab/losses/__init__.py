"""Losses for proxy-based deep metric learning: a functional core plus thin modules.

Public names: the proxy losses (:class:`ProxyNCALoss`, :class:`NormSoftmaxLoss`, :class:`SoftmaxLoss`,
:class:`MarginSoftmaxLoss`, :class:`ProxyAnchorLoss`, :class:`HeatedSoftmaxLoss`, :class:`SoftTripleLoss`,
:class:`VirtualSoftmaxLoss`), the wrapper :class:`ProxySynthesis`, the training-step regulariser
:class:`Mixup` (input / manifold mixup), the pytorch-metric-learning pair baselines (:class:`MarginLoss`,
:class:`TripletSemiHardLoss`, :class:`MultiSimilarityLoss`), the registry ``LOSSES`` (each loss registers itself where
it is defined: ``@LOSSES.register("proxynca")`` on its class) and the factory :func:`build_loss` / :func:`list_losses`.

Every registered factory takes ``(num_classes, embedding_dim, **kwargs)``, so a trainer can build any loss
uniformly: ``build_loss("proxynca", num_classes=100, embedding_dim=2048, temperature=1/9)``,
``build_loss("proxy_synthesis", num_classes=100, embedding_dim=512, base="normsoftmax", alpha=0.4, mu=1.0,
temperature=1/23)`` (remaining keywords go to the base loss).
"""

# ruff: noqa: F401 - the imports are the package's public names

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

from torch import nn

from ..spec import Spec
from . import functional
from ._registry import LOSSES
from .mixup import MIXUP_MODES, Mixup, input_mixup, manifold_mixup
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


def _import_all() -> None:
    """Import every loss module of the package, so that a new one registers its losses with no line here."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_import_all()


def list_losses() -> list[str]:
    """Names accepted by :func:`build_loss`, sorted."""
    return LOSSES.names()


def is_wrapper(name: str) -> bool:
    """Whether the loss registered as ``name`` wraps another loss (its constructor takes the built ``base``)."""
    return bool(getattr(LOSSES.get(name), "wraps", False))


def build_loss(spec: Spec | str, *, num_classes: int, embedding_dim: int, **kwargs: Any) -> nn.Module:
    """Build a loss from its :class:`~dmllab.spec.Spec` (a wrapper around its built base), or from a registered
    name and keyword arguments: ``build_loss("proxynca", num_classes=100, embedding_dim=2048, temperature=1/9)``.

    With a wrapper's name, ``base`` names the wrapped loss (default ``normsoftmax``) and the keywords the wrapper
    does not take go to the base: ``build_loss("proxy_synthesis", num_classes=100, embedding_dim=512,
    base="normsoftmax", alpha=0.4, temperature=1/23)``. An unknown name raises a KeyError listing the valid ones.
    """
    if isinstance(spec, str):
        spec = _spec_of(spec, kwargs)
    elif kwargs:
        raise TypeError("build_loss(spec) takes the spec's own keyword arguments only")
    factory = LOSSES.get(spec.name)
    if not getattr(factory, "wraps", False):
        if spec.wraps is not None:
            raise ValueError(f"loss {spec.name!r} wraps no other loss; its spec has wraps={spec.wraps}")
        return factory(num_classes=num_classes, embedding_dim=embedding_dim, **spec.kw)
    if spec.wraps is None:
        raise ValueError(f"loss {spec.name!r} wraps another loss: give its spec's 'wraps'")
    if is_wrapper(spec.wraps.name) and spec.wraps.name == spec.name:
        raise ValueError(f"{spec.name} cannot wrap itself; choose another loss to wrap")
    base = build_loss(spec.wraps, num_classes=num_classes, embedding_dim=embedding_dim)
    return factory(base, **spec.kw)


def _spec_of(name: str, kwargs: dict[str, Any]) -> Spec:
    """The spec of ``build_loss(name, **kwargs)`` (module docstring of :func:`build_loss`)."""
    if not is_wrapper(name):
        return Spec(name, kwargs)
    own = inspect.signature(LOSSES.get(name)).parameters  # the wrapper's own keywords (a generator included)
    base = kwargs.pop("base", "normsoftmax")
    mine = {k: v for k, v in kwargs.items() if k in own}
    rest = {k: v for k, v in kwargs.items() if k not in own}
    if base not in LOSSES:
        LOSSES.get(base)  # raises, listing the valid names
    return Spec(name, mine, _spec_of(base, rest))
