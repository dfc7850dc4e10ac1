"""SoftTriple loss (Qian et al., ICCV 2019) as a proxy loss with K centres per class.

Used in Proxy Synthesis Tables 4, 6 and F-L ("SoftTriple", supplement Eq. ii-iii). The module owns the
centres as ``proxies`` of shape (C * K, D), class-major (rows ``c * K + k``); :meth:`loss_from_proxies`
takes any (C' * K, D) centre matrix, so Proxy Synthesis can append synthetic classes: it mixes the K
centres of two classes centre by centre (``centers_per_class`` tells it to view the proxies as (C, K * D)).
"""

from __future__ import annotations

import torch

from dmllab.validation import check_int, check_number

from . import functional as LF
from ._registry import LOSSES
from ._validate import check_batch
from .proxy import ProxyLoss, _check_positive_float, _fp32_region


@LOSSES.register("softtriple")
class SoftTripleLoss(ProxyLoss):
    """SoftTriple (SoftTriple Eq. 10 + tau * Eq. 12) on cosine similarities; the paper's defaults.

    Args:
        num_classes: C; embedding_dim: D.
        centers_per_class: K (10).
        scale: lambda, the logit scale (20).
        gamma: the temperature of the softmax over a class's centres, exp(s / gamma) (0.1).
        margin: delta, subtracted from the target class's relaxed similarity (0.01).
        tau: weight of the centre regulariser (0.2; 0 disables it).
        proxy_init: "linear" (kaiming-uniform a = sqrt(5), the authors' and pytorch-metric-learning's init).

    ``logits`` returns the (B, C) relaxed similarities S'(x, c) (margin-free, unscaled).
    With Proxy Synthesis the regulariser runs over the centre matrix it is given, synthetic classes included:
    the loss is one function of (embeddings, proxies), as PS Algorithm 1 requires.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        *,
        centers_per_class: int = 10,
        scale: float = 20.0,
        gamma: float = 0.1,
        margin: float = 0.01,
        tau: float = 0.2,
        proxy_init: str = "linear",
    ) -> None:
        k = check_int("centers_per_class", centers_per_class)
        super().__init__(check_int("num_classes", num_classes) * k, embedding_dim, proxy_init=proxy_init)
        self.num_classes = num_classes  # the base class set C * K rows; C classes
        self.centers_per_class = k
        self.scale = _check_positive_float("scale", scale)
        self.gamma = _check_positive_float("gamma", gamma)
        self.margin = check_number("margin", margin)
        self.tau = check_number("tau", tau, low=0.0)

    def loss_from_proxies(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        proxies: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The loss with explicit centres ``proxies`` (C' * K, D); labels in [0, C')."""
        k = self.centers_per_class
        if not isinstance(proxies, torch.Tensor) or proxies.ndim != 2 or proxies.shape[0] % k:
            raise ValueError(f"proxies must be a (num_classes * {k}, embedding_dim) tensor")
        if bias is not None:
            raise ValueError("SoftTripleLoss has no bias; got a bias tensor")
        check_batch(embeddings, labels, num_classes=proxies.shape[0] // k, embedding_dim=proxies.shape[1])
        with _fp32_region(embeddings.device):
            return self._loss(embeddings.float(), labels.long(), proxies.float(), None)

    def _loss(self, embeddings, labels, proxies, bias):
        return LF.soft_triple(
            embeddings,
            labels,
            proxies,
            centers_per_class=self.centers_per_class,
            scale=self.scale,
            gamma=self.gamma,
            margin=self.margin,
            tau=self.tau,
        )

    def _logits(self, embeddings, proxies, bias):
        return LF.soft_triple_logits(
            embeddings, proxies, centers_per_class=self.centers_per_class, gamma=self.gamma
        )

    def extra_repr(self) -> str:
        return (
            f"num_classes={self.num_classes}, embedding_dim={self.embedding_dim}, "
            f"centers_per_class={self.centers_per_class}, scale={self.scale:g}, gamma={self.gamma:g}, "
            f"margin={self.margin:g}, tau={self.tau:g}"
        )
