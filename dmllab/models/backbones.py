"""Backbones returning the last convolutional feature map (B, C, h, w), with attribute ``out_channels``.

torchvision backbones of ProxyNCA++ Table 2: resnet50 (2048), resnet18 (512), googlenet (1024), inception_v3
(2048), each with its global pooling, dropout and classifier (and auxiliary classifiers) removed; plus the
CPU-sized "smallcnn" (:mod:`dmllab.models.smallcnn`). The trunks keep torchvision's module names, so a
torchvision state dict and a trunk's own ``state_dict()`` load the same way (classifier keys are dropped).

Deviation: BN-Inception (used by Proxy Anchor, Proxy Synthesis and part of ProxyNCA++'s Table 2) is not in
torchvision and is not provided.

Pre-trained weights: ``pretrained=True`` loads torchvision's ImageNet weights ``imagenet_weights="IMAGENET1K_V1"``
by default: the weights the papers' code got from ``torchvision.models.resnet50(pretrained=True)`` in 2020 (the
only ImageNet weights torchvision has for the other three trunks). torchvision's newer recipe (resnet50
IMAGENET1K_V2, about 5 points more ImageNet top-1) is selectable with ``imagenet_weights="IMAGENET1K_V2"`` or
``"DEFAULT"``; it is a deviation from the papers. ``weights_path=`` loads a local file and
takes precedence over the download. If the weights cannot be obtained, a RuntimeError explains how to provide
them; dmllab never falls back to random weights.

GoogLeNet / Inception-v3 input: torchvision's ImageNet weights for these two were ported from TensorFlow and
expect inputs scaled to [-1, 1]; torchvision therefore turns ``transform_input`` on whenever it loads them,
converting ImageNet-mean/std-normalised input. dmllab does the same: ``transform_input=None`` means "on exactly
when weights are loaded (pretrained or weights_path)", and it can be forced either way. A weights_path file
is assumed to hold such ImageNet-style weights (torchvision's file, or a trunk fine-tuned from it); pass
``transform_input=False`` for a file trained from scratch without the transform.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import torch
from torch import nn

from dmllab.models.smallcnn import build_smallcnn
from dmllab.models.weights import (
    TORCHVISION_SPECS,
    download_imagenet_state_dict,
    load_trunk_state_dict,
    read_state_dict,
    weights_member,
)
from dmllab.registry import Registry

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


class InceptionInputTransform(nn.Module):
    """Map ImageNet-mean/std-normalised input to the [-1, 1] scaling the TF-ported GoogLeNet/Inception weights expect.

    With x = (u - mean) / std for u in [0, 1], returns (u - 0.5) / 0.5 = x * std / 0.5 + (mean - 0.5) / 0.5.
    No state-dict entries (non-persistent buffers).
    """

    def __init__(self) -> None:
        super().__init__()
        mean = torch.tensor(_IMAGENET_MEAN).reshape(1, 3, 1, 1)
        std = torch.tensor(_IMAGENET_STD).reshape(1, 3, 1, 1)
        self.register_buffer("scale", std / 0.5, persistent=False)
        self.register_buffer("shift", (mean - 0.5) / 0.5, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.shift


class ConvTrunk(nn.Module):
    """The convolutional part of a torchvision classifier: its children, in forward order, applied one after another.

    Args:
        layers: (name, module) pairs in the order the classifier's forward applies them; the names are
            kept so state-dict keys equal torchvision's.
        out_channels: channels of the output feature map.
        input_transform: optional module applied to the input first (no state).
    """

    def __init__(
        self,
        layers: Iterable[tuple[str, nn.Module]],
        out_channels: int,
        input_transform: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.out_channels = out_channels
        # Registered first: children() yields modules in registration order, which is the forward order.
        self.input_transform = input_transform if input_transform is not None else nn.Identity()
        # Top-level children (not inside a container) so that keys are "conv1.weight", as in torchvision.
        for name, module in layers:
            self.add_module(name, module)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.children():
            x = module(x)
        return x  # (B, out_channels, h, w)


def _build_torchvision_trunk(
    arch: str,
    *,
    pretrained: bool,
    weights_path: str | os.PathLike[str] | None,
    imagenet_weights: str,
    transform_input: bool | None,
) -> ConvTrunk:
    spec = TORCHVISION_SPECS[arch]
    loads_weights = pretrained or weights_path is not None
    # Random init is wasted work when every parameter is overwritten by strict loading.
    classifier, enum_cls = spec.make(not loads_weights)
    weights = weights_member(enum_cls, imagenet_weights, arch) if pretrained else None
    if transform_input is None:
        transform_input = spec.tf_ported_weights and loads_weights
    trunk = ConvTrunk(
        [(name, child) for name, child in classifier.named_children() if name not in spec.drop],
        spec.out_channels,
        input_transform=InceptionInputTransform() if transform_input else None,
    )
    if weights_path is not None:
        load_trunk_state_dict(trunk, read_state_dict(weights_path), source=str(weights_path))
    elif weights is not None:
        state = download_imagenet_state_dict(weights, arch=arch)
        load_trunk_state_dict(trunk, state, source=f"torchvision {weights}")
    return trunk


def _torchvision_builder(arch: str) -> Callable[..., ConvTrunk]:
    def build(
        *,
        pretrained: bool = False,
        weights_path: str | os.PathLike[str] | None = None,
        imagenet_weights: str = "IMAGENET1K_V1",
        transform_input: bool | None = None,
    ) -> ConvTrunk:
        return _build_torchvision_trunk(
            arch,
            pretrained=pretrained,
            weights_path=weights_path,
            imagenet_weights=imagenet_weights,
            transform_input=transform_input,
        )

    build.__name__ = f"build_{arch}"
    build.__doc__ = f"Build the {arch} conv trunk (see :mod:`dmllab.models.backbones`)."
    return build


#: Every backbone by name; the builder supplies the weights (``pretrained``, ``weights_path``).
BACKBONES: Registry[Callable[..., nn.Module]] = Registry("backbone", supplied=("pretrained", "weights_path"))
for _arch in TORCHVISION_SPECS:
    BACKBONES.register(_arch, _torchvision_builder(_arch))
BACKBONES.register("smallcnn", build_smallcnn)


def list_backbones() -> list[str]:
    """The registered backbone names, sorted."""
    return BACKBONES.names()


def build_backbone(
    name: str,
    *,
    pretrained: bool = False,
    weights_path: str | os.PathLike[str] | None = None,
    **kwargs: object,
) -> nn.Module:
    """Build a backbone by name: forward(x: (B, 3, H, W)) -> feature map (B, out_channels, h, w).

    Args:
        name: one of :func:`list_backbones`; unknown names raise a KeyError listing the valid ones.
        pretrained: load the default pre-trained weights (torchvision ImageNet; for smallcnn the synthetic
            pre-training file).
        weights_path: a local state-dict file to load instead (torchvision classifier format or the trunk's own).
        **kwargs: backbone options: torchvision ones take ``imagenet_weights`` and ``transform_input``,
            smallcnn takes ``width`` and ``in_channels``; anything else is a TypeError.
    """
    return BACKBONES.get(name)(pretrained=pretrained, weights_path=weights_path, **kwargs)
