"""Virtual Softmax (Chen, Deng, Shen, NeurIPS 2018), the first regulariser of Proxy Synthesis Table 5.

A softmax classifier that appends, for each sample, one virtual negative class with weight
``W_virt = ||W_y|| x / ||x||`` (PS Sec. 2). Only meaningful for the unnormalised Softmax: with normalised
weights and features the virtual logit is a constant (PS Sec. 4.5: "not applicable to Norm-softmax").
"""

from __future__ import annotations

import math

import torch

from dmllab.validation import check_number

from . import functional as LF
from ._registry import LOSSES
from .proxy import ProxyLoss


@LOSSES.register("virtual_softmax")
class VirtualSoftmaxLoss(ProxyLoss):
    """Softmax (linear classifier with bias, like :class:`~dmllab.losses.SoftmaxLoss`) + a virtual class.

    Args:
        num_classes, embedding_dim: C, D.
        clip: cap on the virtual logit ``||W_y|| ||x||`` (10, PS supplement D.4; None: no cap).
        proxy_init: "linear" (``nn.Linear``'s init; the bias U(-1/sqrt(D), 1/sqrt(D)) as there).

    ``logits`` returns the C real-class scores (the virtual class exists only for a known label).
    Proxy Synthesis can wrap it: the virtual class is built per sample from that sample's own label, so a
    synthetic sample's virtual weight is ``||p~|| x~ / ||x~||``.
    """

    normalizes_embeddings = False
    normalizes_proxies = False

    def __init__(
        self, num_classes: int, embedding_dim: int, *, clip: float | None = 10.0, proxy_init: str = "linear"
    ) -> None:
        super().__init__(num_classes, embedding_dim, proxy_init=proxy_init, bias=True)
        self.clip = check_number("clip", clip, low=0.0, low_open=True, allow_none=True)
        bound = 1.0 / math.sqrt(embedding_dim)
        with torch.no_grad():
            self.bias.uniform_(-bound, bound)

    def _loss(self, embeddings, labels, proxies, bias):
        return LF.virtual_softmax(embeddings, labels, proxies, bias, clip=self.clip)

    def _logits(self, embeddings, proxies, bias):
        return LF.softmax_logits(embeddings, proxies, bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, clip={self.clip}"
