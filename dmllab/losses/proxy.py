"""Thin ``nn.Module`` wrappers around :mod:`dmllab.losses.functional` that own the learnable proxies.

Each module holds hyper-parameters and ``proxies`` (an ``nn.Parameter`` of shape (C, D)); the maths lives in
the functional core. Shared behaviour (in :class:`ProxyLoss`):

* ``forward(embeddings, labels)`` validates the batch and returns a float32 scalar;
* ``loss_from_proxies(embeddings, labels, proxies, bias=None)`` evaluates the loss with given class
  representatives (Proxy Synthesis appends synthetic ones);
* ``logits(embeddings)`` returns the (B, C) float32 scores fed to the cross-entropy (cosine similarities for
  Proxy Anchor, which has no softmax);
* mixed precision: inputs are cast to float32 and autocast is disabled inside the loss, so under fp16/bf16
  autocast the proxies stay float32 and the logits are computed in float32.

Proxy initialisation (``proxy_init``, every proxy loss; the registry :data:`PROXY_INITS`): "randn/8" (ProxyNCA++
released code, loss.py: ``torch.randn(nb_classes, sz_embed) / 8``; norm about sqrt(D)/8, 2.8 at D = 512),
"kaiming_normal_fan_out" (Proxy Anchor released code, losses.py), "linear" (``nn.Linear``'s default,
``kaiming_uniform_(a=sqrt(5))``: U(-1/sqrt(D), 1/sqrt(D)), norm about 1/sqrt(3) = 0.58 at any D; the Proxy Synthesis
release initialises its Norm_SoftMax and Proxy_NCA proxies so, loss/proxy_losses.py).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from functools import partial

import torch
from torch import nn

from dmllab.validation import check_int, check_number

from ..registry import Registry
from . import functional as LF
from ._registry import LOSSES
from ._validate import check_batch, check_embeddings

# Proxy Synthesis supplement, Section "Implementation details" (values quoted from the PS paper text):
# "gamma = 30.0, m1 = 1.05, m2 = 0.0, m3 = 0.0 ... SphereFace, gamma = 23.0, m1 = 1.0, m2 = 0.0, m3 = 0.1 ...
#  CosFace, and gamma = 23.0, m1 = 1.0, m2 = 0.1, m3 = 0.0 ... ArcFace".
MARGIN_SOFTMAX_PRESETS: dict[str, dict[str, float]] = {
    "sphereface": {"scale": 30.0, "m1": 1.05, "m2": 0.0, "m3": 0.0},
    "cosface": {"scale": 23.0, "m1": 1.0, "m2": 0.0, "m3": 0.1},
    "arcface": {"scale": 23.0, "m1": 1.0, "m2": 0.1, "m3": 0.0},
}


# name -> in-place initialiser of a (C, D) tensor (called under ``torch.no_grad``).
PROXY_INITS: Registry = Registry("proxy_init")
PROXY_INITS.register("randn/8", lambda t: t.normal_(0.0, 1.0).div_(8.0))
PROXY_INITS.register("kaiming_normal_fan_out", lambda t: nn.init.kaiming_normal_(t, mode="fan_out"))
PROXY_INITS.register("linear", lambda t: nn.init.kaiming_uniform_(t, a=math.sqrt(5)))


def init_proxies(tensor: torch.Tensor, scheme: str) -> torch.Tensor:
    """Initialise a (C, D) proxy/weight tensor in place with the :data:`PROXY_INITS` entry ``scheme``; return it.

    Raises ValueError: an unknown ``scheme``, listing the valid ones."""
    if scheme not in PROXY_INITS:
        raise ValueError(f"unknown proxy_init {scheme!r}; valid: {', '.join(PROXY_INITS.names())}")
    with torch.no_grad():
        PROXY_INITS.get(scheme)(tensor)
    return tensor


def _fp32_region(device: torch.device) -> AbstractContextManager:
    """Disable autocast for ``device`` so that the loss is computed in the dtype it is given (float32)."""
    return torch.autocast(device_type=device.type, enabled=False)


class ProxyLoss(nn.Module):
    """Base class of the proxy / classifier losses: owns ``proxies`` (C, D) and an optional ``bias`` (C,).

    Subclasses implement ``_loss(embeddings, labels, proxies, bias)`` and ``_logits(embeddings, proxies,
    bias)`` on float32 tensors, and declare whether they L2-normalise embeddings / proxies internally
    (Proxy Synthesis mixes in that same normalised space).
    """

    has_proxies: bool = True
    normalizes_embeddings: bool = True
    normalizes_proxies: bool = True

    def __init__(self, num_classes: int, embedding_dim: int, *, proxy_init: str, bias: bool = False) -> None:
        super().__init__()
        self.num_classes = check_int("num_classes", num_classes)
        self.embedding_dim = check_int("embedding_dim", embedding_dim)
        self.proxies = nn.Parameter(init_proxies(torch.empty(num_classes, embedding_dim), proxy_init))
        self.bias: nn.Parameter | None = nn.Parameter(torch.zeros(num_classes)) if bias else None

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Loss of a batch: ``embeddings`` (B, D) float, ``labels`` (B,) long in [0, C) -> float32 scalar."""
        return self.loss_from_proxies(embeddings, labels, self.proxies)

    def loss_from_proxies(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        proxies: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The loss with explicit class representatives ``proxies`` (C', D) (and ``bias`` (C',) if used).

        Labels must lie in [0, C'). When the module has a bias and ``bias`` is None, ``self.bias`` is used
        (then C' must equal C).
        """
        if not isinstance(proxies, torch.Tensor) or proxies.ndim != 2:
            raise ValueError("proxies must be a (num_classes, embedding_dim) tensor")
        check_batch(embeddings, labels, num_classes=proxies.shape[0], embedding_dim=proxies.shape[1])
        bias = self._resolve_bias(bias, proxies.shape[0])
        with _fp32_region(embeddings.device):
            return self._loss(
                embeddings.float(),
                labels.long(),
                proxies.float(),
                None if bias is None else bias.float(),
            )

    def logits(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Scores of every embedding against every class, (B, C) float32 (the cross-entropy input)."""
        check_embeddings(embeddings, self.embedding_dim)
        with _fp32_region(embeddings.device):
            bias = None if self.bias is None else self.bias.float()
            return self._logits(embeddings.float(), self.proxies.float(), bias)

    def _resolve_bias(self, bias: torch.Tensor | None, num_proxies: int) -> torch.Tensor | None:
        if self.bias is None:
            if bias is not None:
                raise ValueError(f"{type(self).__name__} has no bias; got a bias tensor")
            return None
        bias = self.bias if bias is None else bias
        if bias.shape != (num_proxies,):
            raise ValueError(
                f"bias must have shape ({num_proxies},) to match the proxies; got {tuple(bias.shape)}"
            )
        return bias

    def _loss(
        self, embeddings: torch.Tensor, labels: torch.Tensor, proxies: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        raise NotImplementedError

    def _logits(
        self, embeddings: torch.Tensor, proxies: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, embedding_dim={self.embedding_dim}"


def _check_positive_float(name: str, value: float) -> float:
    return check_number(name, value, low=0.0, low_open=True)


@LOSSES.register("proxynca")
class ProxyNCALoss(ProxyLoss):
    """ProxyNCA++ (Eq. 6, ``prob=True``) or classic ProxyNCA (Eq. 3, ``prob=False``).

    Squared Euclidean distance between the L2-normalised embeddings and proxies, divided by the temperature
    T (ProxyNCA++ uses T = 1/9; ``temperature=1`` is the unscaled loss). Proxies are initialised randn/8 as
    in the ProxyNCA++ released code (``proxy_init``: any :data:`PROXY_INITS` entry; the Proxy Synthesis release
    uses "linear"). ``logits`` returns -d / T.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        *,
        temperature: float = 1.0 / 9.0,
        prob: bool = True,
        proxy_init: str = "randn/8",
    ) -> None:
        super().__init__(num_classes, embedding_dim, proxy_init=proxy_init)
        self.temperature = _check_positive_float("temperature", temperature)
        self.prob = bool(prob)

    def _loss(self, embeddings, labels, proxies, bias):
        return LF.proxy_nca(embeddings, labels, proxies, temperature=self.temperature, prob=self.prob)

    def _logits(self, embeddings, proxies, bias):
        return LF.proxy_nca_logits(embeddings, proxies, temperature=self.temperature)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, temperature={self.temperature:g}, prob={self.prob}"


@LOSSES.register("normsoftmax")
class NormSoftmaxLoss(ProxyLoss):
    """NormSoftMax (ProxyNCA++ appendix Eq. 9): cross-entropy over cos(x, p) / T; default T = 1/2.

    Proxies are initialised randn/8 by default, the ProxyNCA++ code base in which ProxyNCA++ Tables 12-13
    compare NormSoftMax (only the proxies' norm matters, through the effective proxy learning rate).
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        *,
        temperature: float = 0.5,
        proxy_init: str = "randn/8",
    ) -> None:
        super().__init__(num_classes, embedding_dim, proxy_init=proxy_init)
        self.temperature = _check_positive_float("temperature", temperature)

    def _loss(self, embeddings, labels, proxies, bias):
        return LF.norm_softmax(embeddings, labels, proxies, temperature=self.temperature)

    def _logits(self, embeddings, proxies, bias):
        return LF.norm_softmax_logits(embeddings, proxies, temperature=self.temperature)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, temperature={self.temperature:g}"


@LOSSES.register("softmax")
class SoftmaxLoss(ProxyLoss):
    """The SM baseline: an unnormalised linear classifier with bias (``proxies`` are its weight rows).

    Initialised like ``nn.Linear`` (weight kaiming-uniform a = sqrt(5), bias U(-1/sqrt(D), 1/sqrt(D))).
    Nothing is normalised, so Proxy Synthesis mixes raw embeddings, weights and biases.
    """

    normalizes_embeddings = False
    normalizes_proxies = False

    def __init__(self, num_classes: int, embedding_dim: int, *, proxy_init: str = "linear") -> None:
        super().__init__(num_classes, embedding_dim, proxy_init=proxy_init, bias=True)
        bound = 1.0 / math.sqrt(embedding_dim)
        with torch.no_grad():
            self.bias.uniform_(-bound, bound)

    def _loss(self, embeddings, labels, proxies, bias):
        return LF.softmax(embeddings, labels, proxies, bias)

    def _logits(self, embeddings, proxies, bias):
        return LF.softmax_logits(embeddings, proxies, bias)


@LOSSES.register("heated_softmax")
class HeatedSoftmaxLoss(ProxyLoss):
    """Heated-up Softmax: logits alpha * <f, w_hat> + b on the embedding f as given by the model head.

    ``alpha`` is a plain attribute the trainer may change (heating-up: 16 -> 4). ``normalize_weights=False``
    gives alpha * <f, w> + b.

    ``learn_alpha=True`` (Heated-up Table 5: "alpha as a learnable parameter", initial value ``alpha``): alpha is
    an ``nn.Parameter`` (``alpha_param``, trained with the loss's parameter group). Setting ``alpha`` then sets a
    heating factor ``alpha / alpha_init`` (the trainer sets the initial alpha before heating and alpha_init / 4
    after) applied to the learned value, which is frozen from heating on: the heated alpha is the learned alpha
    at the heating epoch times 1/4, as Table 5 prints (final 15.6 -> heat-up 3.9). ``alpha`` reads the
    effective value (learned x factor). Weights are initialised like ``nn.Linear`` and the bias with zeros (a choice:
    the paper does not state its initialisation).

    Bias placement: the paper's Eq. 1 scales the whole logit, alpha * (<f, w> + b); dmllab adds the bias
    after the scale (CONTRACT.md and official-code.md: "alpha * <f_hat, w_hat> (+ bias in the code)"). With a
    learned bias the two differ only by a reparametrisation b' = alpha * b, except at the heating-up step,
    where alpha * b would shrink with alpha and b does not.
    """

    normalizes_embeddings = False

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        *,
        alpha: float = 16.0,
        bias: bool = True,
        normalize_weights: bool = True,
        proxy_init: str = "linear",
        learn_alpha: bool = False,
    ) -> None:
        super().__init__(num_classes, embedding_dim, proxy_init=proxy_init, bias=bias)
        alpha = _check_positive_float("alpha", alpha)
        self.learn_alpha = bool(learn_alpha)
        if self.learn_alpha:
            self.alpha_init = alpha
            self.alpha_param = nn.Parameter(torch.tensor(alpha))
            self.register_buffer("heat_factor", torch.tensor(1.0))
            self._heated = False  # heat_factor != 1, kept on the host: no device read per step
        else:
            self._alpha = alpha
        self.normalize_weights = bool(normalize_weights)
        self.normalizes_proxies = self.normalize_weights

    @property
    def alpha(self) -> float:
        """The effective scale (with ``learn_alpha``: the learned value times the heating factor)."""
        if self.learn_alpha:
            return float(self.alpha_param.detach()) * float(self.heat_factor)
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        value = _check_positive_float("alpha", value)
        if self.learn_alpha:
            self.heat_factor.fill_(value / self.alpha_init)
            # the factor as the buffer holds it (float32): heated when that is not 1
            factor = torch.tensor(value / self.alpha_init, dtype=self.heat_factor.dtype)
            self._heated = factor.item() != 1.0
        else:
            self._alpha = value

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if self.learn_alpha:
            self._heated = float(self.heat_factor) != 1.0

    def _scale(self) -> torch.Tensor | float:
        """alpha for the logits: the learnable parameter (detached once heated) times the heating factor."""
        if not self.learn_alpha:
            return self._alpha
        return (self.alpha_param.detach() if self._heated else self.alpha_param).float() * self.heat_factor

    def _logits(self, embeddings, proxies, bias):
        alpha = self._scale()
        if self.normalize_weights:
            return LF.heated_softmax_logits(embeddings, proxies, bias, alpha=alpha)
        return alpha * LF.softmax_logits(embeddings, proxies, None) + (0.0 if bias is None else bias)

    def _loss(self, embeddings, labels, proxies, bias):
        return nn.functional.cross_entropy(self._logits(embeddings, proxies, bias), labels)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, alpha={self.alpha:g}, bias={self.bias is not None}, "
            f"normalize_weights={self.normalize_weights}, learn_alpha={self.learn_alpha}"
        )


@LOSSES.register("margin_softmax")
class MarginSoftmaxLoss(ProxyLoss):
    """SphereFace / CosFace / ArcFace through the Proxy Synthesis supplement's Eq. 6.

    Target logit gamma (cos(m1 theta + m2) - m3), other logits gamma cos; ``scale`` is gamma. Presets with
    the PS paper's values: :meth:`from_preset` ("sphereface", "cosface", "arcface"). ``logits`` returns the
    margin-free gamma * cos (no label is known at inference). Proxies are initialised randn/8.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        *,
        scale: float,
        m1: float = 1.0,
        m2: float = 0.0,
        m3: float = 0.0,
        proxy_init: str = "randn/8",
    ) -> None:
        super().__init__(num_classes, embedding_dim, proxy_init=proxy_init)
        self.scale = _check_positive_float("scale", scale)
        self.m1 = _check_positive_float("m1", m1)
        self.m2, self.m3 = check_number("m2", m2), check_number("m3", m3)

    @classmethod
    def from_preset(
        cls, preset: str, num_classes: int, embedding_dim: int, **overrides: float
    ) -> MarginSoftmaxLoss:
        """Build a preset from ``MARGIN_SOFTMAX_PRESETS``; keyword ``overrides`` replace preset values."""
        if preset not in MARGIN_SOFTMAX_PRESETS:
            raise ValueError(
                f"unknown margin-softmax preset {preset!r}; valid: {', '.join(MARGIN_SOFTMAX_PRESETS)}"
            )
        return cls(num_classes, embedding_dim, **{**MARGIN_SOFTMAX_PRESETS[preset], **overrides})

    def _loss(self, embeddings, labels, proxies, bias):
        return LF.margin_softmax(
            embeddings, labels, proxies, scale=self.scale, m1=self.m1, m2=self.m2, m3=self.m3
        )

    def _logits(self, embeddings, proxies, bias):
        return LF.margin_softmax_logits(embeddings, proxies, scale=self.scale)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scale={self.scale:g}, m1={self.m1:g}, m2={self.m2:g}, m3={self.m3:g}"


for _preset, _values in MARGIN_SOFTMAX_PRESETS.items():  # sphereface, cosface, arcface: the PS values are
    LOSSES.register(_preset, partial(MarginSoftmaxLoss, **_values))  # their keywords' defaults (in the key)


@LOSSES.register("proxy_anchor")
class ProxyAnchorLoss(ProxyLoss):
    """Proxy Anchor (Eq. 4) on cosine similarity, alpha = 32, delta = 0.1, official-code averaging.

    Positive term averaged over the proxies with a positive in the batch, negative term over all C proxies,
    evaluated with logsumexp so that it cannot overflow. Proxies: kaiming_normal_ (fan_out) as in the
    released code. ``logits`` returns the cosine similarities.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        *,
        alpha: float = 32.0,
        delta: float = 0.1,
        proxy_init: str = "kaiming_normal_fan_out",
    ) -> None:
        super().__init__(num_classes, embedding_dim, proxy_init=proxy_init)
        self.alpha = _check_positive_float("alpha", alpha)
        self.delta = check_number("delta", delta, low=0.0)

    def _loss(self, embeddings, labels, proxies, bias):
        return LF.proxy_anchor(embeddings, labels, proxies, alpha=self.alpha, delta=self.delta)

    def _logits(self, embeddings, proxies, bias):
        return LF.cosine_similarity_matrix(embeddings, proxies)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, alpha={self.alpha:g}, delta={self.delta:g}"
