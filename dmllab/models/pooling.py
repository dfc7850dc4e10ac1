"""Global pooling of a convolutional feature map (B, C, H, W) into one vector per image (B, C).

- ``avg``: global average pooling (ProxyNCA, NormSoftmax).
- ``max``: global max pooling (ProxyNCA++ "+max", Sec. 3.6).
- ``avg+max``: GAP + GMP summed, the head of the Proxy Anchor code (undisclosed in the paper, see
  official-code.md).
- ``kmax``: global k-max pooling, ProxyNCA++ Eq. 7: the mean of the k largest activations of each channel.
  k = 1 is global max pooling and k = H*W is global average pooling.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
from torch import nn

from dmllab.registry import Registry


def _check_feature_map(x: torch.Tensor) -> None:
    if x.dim() != 4:
        raise ValueError(f"global pooling expects a feature map (B, C, H, W), got shape {tuple(x.shape)}")


def global_kmax_pool2d(x: torch.Tensor, k: int) -> torch.Tensor:
    """Global k-max pooling (ProxyNCA++ Eq. 7): per channel, the mean of the ``k`` largest of the H*W activations.

    Args:
        x: feature map (B, C, H, W); any memory format (channels-last included).
        k: number of top activations averaged, 1 <= k <= H*W.

    Returns (B, C) pooled features. The gradient reaches only the k selected positions, 1/k each."""
    _check_feature_map(x)
    height, width = x.shape[-2:]
    if k > height * width:
        raise ValueError(
            f"k-max pooling with k={k} needs at least k spatial positions, but the feature map is "
            f"{height}x{width} = {height * width} positions; use k <= {height * width}"
        )
    flat = x.flatten(2)  # (B, C, H*W); flatten copies when the layout (e.g. channels-last) needs it
    return flat.topk(k, dim=2, largest=True, sorted=False).values.mean(dim=2)  # (B, C)


class GlobalAvgPool2d(nn.Module):
    """Global average pooling: (B, C, H, W) -> (B, C)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_feature_map(x)
        return x.mean(dim=(2, 3))


class GlobalMaxPool2d(nn.Module):
    """Global max pooling (ProxyNCA++ +max): (B, C, H, W) -> (B, C)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_feature_map(x)
        return x.amax(dim=(2, 3))


class GlobalAvgMaxPool2d(nn.Module):
    """Global average pooling plus global max pooling, summed (the Proxy Anchor code's head): (B, C, H, W) -> (B, C)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_feature_map(x)
        return x.mean(dim=(2, 3)) + x.amax(dim=(2, 3))


class GlobalKMaxPool2d(nn.Module):
    """Global k-max pooling, ProxyNCA++ Eq. 7 (see :func:`global_kmax_pool2d`).

    Args:
        k: number of largest activations per channel that are averaged; k=1 is max pooling, k=H*W average
            pooling. A k larger than the feature map raises a ValueError at forward time.
    """

    def __init__(self, k: int) -> None:
        super().__init__()
        try:
            k_int = operator.index(k)  # accepts numpy integers, rejects floats
        except TypeError:
            k_int = None
        if isinstance(k, bool) or k_int is None or k_int < 1:
            raise ValueError(f"k-max pooling needs an integer k >= 1, got {k!r}")
        self.k = k_int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_kmax_pool2d(x, self.k)

    def extra_repr(self) -> str:
        return f"k={self.k}"


POOLINGS: Registry[Callable[..., nn.Module]] = Registry("pooling")
POOLINGS.register("avg", GlobalAvgPool2d)
POOLINGS.register("max", GlobalMaxPool2d)
POOLINGS.register("avg+max", GlobalAvgMaxPool2d)
POOLINGS.register("kmax", GlobalKMaxPool2d)


def list_poolings() -> list[str]:
    """The registered pooling names, sorted."""
    return POOLINGS.names()


def build_pooling(name: str, *, k: int | None = None) -> nn.Module:
    """Build a global pooling layer by name.

    Args:
        name: one of :func:`list_poolings` ("avg", "avg+max", "kmax", "max"); unknown names raise a KeyError
            listing the valid ones.
        k: the k of "kmax" (required there); giving k to another pooling is an error rather than silently ignored.
    """
    factory = POOLINGS.get(name)
    if name == "kmax":
        if k is None:
            raise ValueError("pooling 'kmax' needs k (the number of top activations per channel), e.g. k=4")
        return factory(k)
    if k is not None:
        raise ValueError(f"k={k} is only used by pooling 'kmax', not by {name!r}; leave k=None")
    return factory()
