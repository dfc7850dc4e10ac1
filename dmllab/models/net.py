"""EmbeddingNet = backbone (conv feature map) + EmbeddingHead, and the ``build_model`` factory."""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from dmllab.models.backbones import build_backbone
from dmllab.models.heads import EmbeddingHead


def _batchnorm_layers(module: nn.Module) -> list[_BatchNorm]:
    return [m for m in module.modules() if isinstance(m, _BatchNorm)]


def freeze_batchnorm(module: nn.Module, *, affine: bool = True) -> nn.Module:
    """Put every BatchNorm layer of ``module`` in eval mode (running statistics) and, with ``affine``, stop the
    gradients of its affine parameters (weight, bias).

    ``module.train()`` switches BN back to train mode; a plain module must be frozen again after every
    ``train()`` call. :class:`EmbeddingNet` with ``frozen_bn=True`` does that itself. Returns ``module``.
    """
    for bn in _batchnorm_layers(module):
        bn.eval()
        if affine:
            for param in bn.parameters(recurse=False):
                param.requires_grad_(False)
    return module


def unfreeze_batchnorm(module: nn.Module) -> nn.Module:
    """Undo :func:`freeze_batchnorm`: BN affine parameters trainable again, BN mode follows ``module.training``."""
    for bn in _batchnorm_layers(module):
        bn.train(module.training)
        for param in bn.parameters(recurse=False):
            param.requires_grad_(True)
    return module


class EmbeddingNet(nn.Module):
    """Image (B, 3, H, W) -> embedding (B, D): ``head(backbone(x))``.

    Args:
        backbone: returns a feature map (B, C, h, w); has ``out_channels``.
        head: :class:`EmbeddingHead` (or any module mapping the feature map to (B, D)).
        frozen_bn: keep the backbone's BatchNorm statistics frozen (eval mode: the running statistics normalise,
            none are updated), also across ``train()`` calls (the Proxy Anchor and Proxy Synthesis code on
            CUB/Cars). BN layers of the head (Heated-up BN) are never frozen: their batch statistics (and learned
            shift) are the method.
        frozen_bn_affine: also keep the affine parameters (weight, bias) of those BN layers without gradient.
            None (default) = as ``frozen_bn``. The Proxy Anchor release freezes them in the model's constructor
            but sets ``requires_grad = True`` on every trunk parameter when the warm-up ends (train.py), and the
            Proxy Synthesis release only calls ``m.eval()`` (main.py): both train the affine parameters with
            frozen statistics, ``frozen_bn=True, frozen_bn_affine=False``.
    """

    def __init__(
        self,
        backbone: nn.Module,
        head: nn.Module,
        *,
        frozen_bn: bool = False,
        frozen_bn_affine: bool | None = None,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self._frozen_bn = False
        self._affine_setting = frozen_bn_affine
        self.frozen_bn = frozen_bn

    @property
    def frozen_bn(self) -> bool:
        """Whether the backbone's BN statistics are frozen; settable at any time."""
        return self._frozen_bn

    @frozen_bn.setter
    def frozen_bn(self, value: bool) -> None:
        value = bool(value)
        was_affine = self.frozen_bn_affine
        if self._frozen_bn and not value:  # only undo our own freezing; a backbone frozen by the caller stays
            unfreeze_batchnorm(self.backbone)
        self._frozen_bn = value
        self._apply_bn_freeze(undo_affine=was_affine and not self.frozen_bn_affine)

    @property
    def frozen_bn_affine(self) -> bool:
        """Whether the backbone's BN affine parameters are kept without gradient (default: as ``frozen_bn``)."""
        return self._frozen_bn if self._affine_setting is None else bool(self._affine_setting)

    def refreeze_bn(self) -> None:
        """Freeze again what is frozen (BN mode, affine ``requires_grad``): after a caller (the trainer's warm-up
        switch) set ``requires_grad`` on every trunk parameter."""
        self._apply_bn_freeze()

    def _apply_bn_freeze(self, *, undo_affine: bool = False) -> None:
        for bn in _batchnorm_layers(self.backbone):
            if self._frozen_bn:
                bn.eval()
            for param in bn.parameters(recurse=False):
                if self.frozen_bn_affine:
                    param.requires_grad_(False)
                elif undo_affine:
                    param.requires_grad_(True)

    @property
    def embedding_dim(self) -> int:
        """D, the output dimension of the head's Linear layer."""
        return self.head.embedding_dim

    def train(self, mode: bool = True) -> EmbeddingNet:
        super().train(mode)
        self._apply_bn_freeze()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))  # (B, D)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters split for the optimiser: {"backbone": trunk parameters, "embedding": head parameters}.

        Frozen parameters (requires_grad False) are included; optimisers skip parameters without gradient.
        """
        return {"backbone": list(self.backbone.parameters()), "embedding": list(self.head.parameters())}


class EmbeddingTail(nn.Module):
    """Cached frozen-prefix features (B, C, h, w) -> embeddings (B, D): ``model``'s trunk from block ``start`` on
    (``backbone.forward_blocks``, e.g. :class:`~dmllab.models.SmallCNN`), then its head. With the first ``start``
    blocks frozen, ``tail(backbone.forward_blocks(x, 0, start)) == model(x)``. Holds the model (not a copy):
    training the tail trains the model.

    Args:
        model: an :class:`EmbeddingNet` whose backbone has ``forward_blocks``.
        start: the first trunk block the tail runs (the number of frozen, cached blocks).
    """

    def __init__(self, model: nn.Module, start: int) -> None:
        super().__init__()
        if not hasattr(model.backbone, "forward_blocks"):
            raise ValueError(
                f"EmbeddingTail needs a backbone with blocks (smallcnn), got {type(model.backbone).__name__}"
            )
        self.model = model
        self.start = start

    def backbone(self, x: torch.Tensor) -> torch.Tensor:
        """The trunk blocks from ``start`` on cached features -> the trunk's feature map (what manifold mixup
        mixes)."""
        return self.model.backbone.forward_blocks(x, self.start)

    @property
    def head(self) -> nn.Module:
        return self.model.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))  # (B, D)


def build_model(
    *,
    backbone: str,
    embedding_dim: int,
    pooling: str = "avg",
    k: int | None = None,
    norm: str = "none",
    norm_position: str | None = None,
    l2_normalize: bool = False,
    pretrained: bool = False,
    weights_path: str | os.PathLike[str] | None = None,
    head_init: str = "default",
    frozen_bn: bool = False,
    frozen_bn_affine: bool | None = None,
    **backbone_kw: object,
) -> EmbeddingNet:
    """Build backbone + embedding head.

    Args:
        backbone: a name from :func:`dmllab.models.list_backbones`.
        embedding_dim: D.
        pooling, k, norm, norm_position, l2_normalize: see :class:`EmbeddingHead`.
        pretrained, weights_path, **backbone_kw: see :func:`dmllab.models.build_backbone`.
        head_init: "default" or "kaiming" (the head's Linear init, see :class:`EmbeddingHead`).
        frozen_bn, frozen_bn_affine: freeze the backbone's BatchNorm statistics / affine parameters (see
            :class:`EmbeddingNet`).
    """
    trunk = build_backbone(backbone, pretrained=pretrained, weights_path=weights_path, **backbone_kw)
    head = EmbeddingHead(
        trunk.out_channels,
        embedding_dim,
        pooling=pooling,
        k=k,
        norm=norm,
        norm_position=norm_position,
        l2_normalize=l2_normalize,
        init=head_init,
    )
    return EmbeddingNet(trunk, head, frozen_bn=frozen_bn, frozen_bn_affine=frozen_bn_affine)
