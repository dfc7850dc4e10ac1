"""The embedding head: global pooling -> optional normalisation -> Linear -> optional L2 normalisation.

The normalisation options and where the papers put them:

- ``norm="layernorm"`` (ProxyNCA++ "+norm", Sec. 3.5): LayerNorm without affine parameters on the pooled
  backbone features (2048-d for ResNet-50), i.e. *before* the Linear layer: placement ``"pre"``.
- ``norm="batchnorm"`` (Heated-up Softmax Eq. 13): ``f_BN = BN^(f) / sqrt(k)`` where ``BN^`` is batch
  normalisation without the learned scale and ``f`` is the k-dimensional *embedding* (the bottleneck layer that
  feeds the classifier), i.e. *after* the Linear layer: placement ``"post"``. "Without the learned scale"
  (footnote 2) removes gamma only: the learned shift beta (zeros at init) stays, as in TensorFlow's
  ``batch_norm`` default (``center=True, scale=False``) that the paper's wording matches. At init the
  embedding's norm is close to 1, as the paper argues.
- The Heated-up "LN" variant is the L2-normalised embedding: ``l2_normalize=True``.

``norm_position=None`` picks the paper's placement for the chosen norm (layernorm -> "pre", batchnorm ->
"post"); "pre"/"post" can be forced for ablations.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from dmllab.models.pooling import build_pooling

NORMS = ("none", "layernorm", "batchnorm")
NORM_POSITIONS = ("pre", "post")
HEAD_INITS = ("default", "kaiming")
# The placement each paper used (see the module docstring).
_PAPER_POSITION = {"layernorm": "pre", "batchnorm": "post"}


class ScaledBatchNorm1d(nn.Module):
    """Batch normalisation without learned scale, divided by sqrt(dim): Heated-up Softmax Eq. 13.

    ``f_BN = ((f - mean) / sqrt(var + eps) + beta) / sqrt(k)`` with batch statistics in training and running
    statistics in eval mode; ``beta`` (``shift``, (k,), zeros at init) is learned, there is no scale gamma.

    Args:
        num_features: dimension k of the normalised vectors (B, k).
        shift: learn the shift beta (the paper's BN^ drops only the scale); False gives no parameters at all.
    """

    def __init__(self, num_features: int, shift: bool = True) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(num_features, affine=False)
        self.shift: nn.Parameter | None = nn.Parameter(torch.zeros(num_features)) if shift else None
        self.scale = 1.0 / math.sqrt(num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(x)  # (B, k)
        if self.shift is not None:
            x = x + self.shift
        return x * self.scale

    def extra_repr(self) -> str:
        return f"shift={self.shift is not None}, divide_by=sqrt({self.bn.num_features})"


def _build_norm(norm: str, num_features: int) -> nn.Module:
    if norm == "layernorm":
        return nn.LayerNorm(num_features, elementwise_affine=False)
    if norm == "batchnorm":
        return ScaledBatchNorm1d(num_features)
    return nn.Identity()


class EmbeddingHead(nn.Module):
    """Feature map (B, C, H, W) -> embedding (B, D).

    Args:
        in_channels: C, the backbone's ``out_channels``.
        embedding_dim: D.
        pooling: a name from :func:`dmllab.models.pooling.list_poolings` ("avg", "max", "avg+max", "kmax").
        k: the k of k-max pooling (ProxyNCA++ Eq. 7); only with ``pooling="kmax"``.
        norm: "none", "layernorm" (ProxyNCA++ +norm: LayerNorm, no affine) or "batchnorm" (Heated-up
            Softmax Eq. 13: BatchNorm without learned scale, divided by sqrt(dim)).
        norm_position: "pre" (on the pooled C-d features, before Linear), "post" (on the D-d embedding) or
            None for the paper's placement of ``norm`` (layernorm "pre", batchnorm "post").
        l2_normalize: L2-normalise the output embedding (Heated-up LN variant; Proxy Anchor head).
        init: "default" (PyTorch's Linear init, ProxyNCA++ code) or "kaiming" (kaiming_normal_ with
            mode="fan_out" and bias 0, the Proxy Anchor code).
    """

    def __init__(
        self,
        in_channels: int,
        embedding_dim: int,
        *,
        pooling: str = "avg",
        k: int | None = None,
        norm: str = "none",
        norm_position: str | None = None,
        l2_normalize: bool = False,
        init: str = "default",
    ) -> None:
        super().__init__()
        if in_channels < 1 or embedding_dim < 1:
            raise ValueError(
                f"in_channels and embedding_dim must be >= 1, got {in_channels}, {embedding_dim}"
            )
        if norm not in NORMS:
            raise ValueError(f"unknown norm {norm!r}; valid norms: {', '.join(NORMS)}")
        if init not in HEAD_INITS:
            raise ValueError(f"unknown head init {init!r}; valid inits: {', '.join(HEAD_INITS)}")
        if norm_position is not None and norm_position not in NORM_POSITIONS:
            raise ValueError(
                f"unknown norm_position {norm_position!r}; valid: {', '.join(NORM_POSITIONS)} or None"
            )
        if norm == "none":
            if norm_position is not None:
                raise ValueError(f"norm_position={norm_position!r} needs a norm ('layernorm' or 'batchnorm')")
            position = None
        else:
            position = norm_position or _PAPER_POSITION[norm]

        self.in_channels = in_channels
        self.embedding_dim = embedding_dim
        self.norm_name = norm
        self.norm_position = position
        self.l2_normalize = l2_normalize
        self.pool = build_pooling(pooling, k=k)
        self.pre_norm = _build_norm(norm, in_channels) if position == "pre" else nn.Identity()
        self.linear = nn.Linear(in_channels, embedding_dim)
        self.post_norm = _build_norm(norm, embedding_dim) if position == "post" else nn.Identity()
        if init == "kaiming":
            nn.init.kaiming_normal_(self.linear.weight, mode="fan_out")
            nn.init.zeros_(self.linear.bias)

    def forward(self, feature_map: torch.Tensor) -> torch.Tensor:
        x = self.pool(feature_map)  # (B, C)
        x = self.pre_norm(x)  # (B, C)
        x = self.linear(x)  # (B, D)
        x = self.post_norm(x)  # (B, D)
        if self.l2_normalize:
            x = F.normalize(x, p=2.0, dim=1)
        return x

    def extra_repr(self) -> str:
        return (
            f"norm={self.norm_name!r}, norm_position={self.norm_position!r}, l2_normalize={self.l2_normalize}"
        )
