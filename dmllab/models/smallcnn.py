"""SmallCNN: a CPU-sized conv trunk for the quick profile (64x64 images, 56x56 crops).

Four stages of conv3x3-BN-ReLU (two convolutions in stages 2 and 3), stride 2 in stages 1-3, so the feature
map is 7x7 for 56x56 crops and 8x8 for 64x64 images: large enough that the choice of global pooling
(avg / max / k-max) matters. ``out_channels = 8 * width`` (256 for the default width 32).

Its "pre-trained" weights come from dmllab itself: the quick profile pre-trains it as a classifier on the
synthetic pre-training pool (classes disjoint from the metric-learning splits), the stand-in for ImageNet
pre-training. The file lives at :func:`default_smallcnn_weights_path`; the trainer gets it through the
"synthetic-pretrain" weights source of :mod:`dmllab.models.weights`, which pre-trains it when missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from dmllab.models.weights import load_trunk_state_dict, read_state_dict
from dmllab.paths import cache_dir

SMALLCNN_WEIGHTS_FILE = "smallcnn-synthetic.pt"


def default_smallcnn_weights_path(width: int = 32, pretrain_seed: int = 0) -> Path:
    """Where ``pretrained=True`` looks for SmallCNN weights of ``width``: ``<cache_dir>/weights/smallcnn-synthetic.pt``
    for the default width 32, ``smallcnn-synthetic-w<width>.pt`` otherwise (the quick profile's width 16);
    ``pretrain_seed`` k > 0 (the trunk pre-trained on the pre-training pool of the synthetic draw k, see
    :mod:`dmllab.training.pretrain`) adds ``-s<k>``."""
    name = SMALLCNN_WEIGHTS_FILE if width == 32 else SMALLCNN_WEIGHTS_FILE.replace(".pt", f"-w{width}.pt")
    if pretrain_seed:
        name = name.replace(".pt", f"-s{int(pretrain_seed)}.pt")
    return cache_dir() / "weights" / name


def _conv_bn_relu(in_channels: int, out_channels: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class SmallCNN(nn.Module):
    """A small conv trunk returning a feature map (B, 8*width, H/8, W/8).

    Args:
        width: channels of the first stage; stages have width, 2*width, 4*width, 8*width channels.
        in_channels: image channels.
    """

    def __init__(self, width: int = 32, in_channels: int = 3) -> None:
        super().__init__()
        if width < 1 or in_channels < 1:
            raise ValueError(
                f"width and in_channels must be >= 1, got width={width}, in_channels={in_channels}"
            )
        self.width = width
        self.out_channels = 8 * width
        self.stage1 = _conv_bn_relu(in_channels, width, stride=2)  # H/2
        self.stage2 = nn.Sequential(
            _conv_bn_relu(width, 2 * width, stride=2), _conv_bn_relu(2 * width, 2 * width, stride=1)
        )  # H/4
        self.stage3 = nn.Sequential(
            _conv_bn_relu(2 * width, 4 * width, stride=2), _conv_bn_relu(4 * width, 4 * width, stride=1)
        )  # H/8
        self.stage4 = _conv_bn_relu(4 * width, 8 * width, stride=1)  # H/8
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        self.frozen_blocks = 0  # see freeze_blocks

    def blocks(self) -> list[nn.Module]:
        """The six conv-BN-ReLU blocks in order: stage1, stage2 (2), stage3 (2), stage4.

        A plain list (not a registered container), so the state-dict keys stay ``stageN...``.
        """
        return [self.stage1, *self.stage2, *self.stage3, self.stage4]

    def forward_blocks(self, x: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Run blocks ``start..stop-1`` (:meth:`blocks`) on ``x``: the input of block ``start`` -> the output
        of block ``stop - 1`` (e.g. cached features of a frozen prefix -> the trunk's feature map)."""
        for block in self.blocks()[start:stop]:
            x = block(x)
        return x

    def freeze_blocks(self, n: int) -> SmallCNN:
        """Freeze the first ``n`` blocks: no gradients, BatchNorm in eval mode (running statistics) also across
        ``train()`` calls, so the prefix is a fixed function whose output can be cached (``model.frozen_blocks``).
        Calling it again (e.g. after a warm-up re-enabled gradients) re-applies the freezing. Returns self."""
        blocks = self.blocks()
        if not 0 <= n <= len(blocks):
            raise ValueError(f"frozen_blocks must be in 0..{len(blocks)}, got {n}")
        self.frozen_blocks = n
        for block in blocks[:n]:
            block.eval()
            for p in block.parameters():
                p.requires_grad_(False)
        return self

    def train(self, mode: bool = True) -> SmallCNN:
        super().train(mode)
        for block in self.blocks()[: self.frozen_blocks]:
            block.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.frozen_blocks
        if n:
            with torch.no_grad():  # the frozen prefix: a fixed function
                x = self.forward_blocks(x, 0, n)
        # stage1 (B, w, H/2, W/2) -> stage2 (B, 2w, H/4, W/4) -> stage3 (B, 4w, H/8, W/8) -> stage4 (B, 8w, H/8, W/8)
        return self.forward_blocks(x, n)


def build_smallcnn(
    *,
    pretrained: bool = False,
    weights_path: str | os.PathLike[str] | None = None,
    width: int = 32,
    in_channels: int = 3,
    pretrain_seed: int = 0,
) -> SmallCNN:
    """Build a :class:`SmallCNN`; ``weights_path`` (if given) or, with ``pretrained=True``, the default file is loaded.
    ``pretrain_seed`` names the synthetic draw whose pre-training pool the default file was pre-trained on (it
    selects that file and, through the weights source, the run key; the architecture does not depend on it).

    Raises:
        FileNotFoundError: ``pretrained=True`` and no weights file exists; the message says how to make one.
    """
    model = SmallCNN(width=width, in_channels=in_channels)
    if weights_path is None and pretrained:
        weights_path = default_smallcnn_weights_path(width, pretrain_seed)
        if not weights_path.is_file():
            raise FileNotFoundError(
                f"no pre-trained SmallCNN weights at {weights_path}. The quick profile pre-trains SmallCNN on the "
                "synthetic pre-training pool (classes disjoint from the metric-learning splits): run "
                f"`dmllab pretrain --width {width}` to create this file (the location follows $DMLLAB_CACHE), or pass "
                "weights_path=<a saved SmallCNN state dict>, or use pretrained=False to start from random weights."
            )
    if weights_path is not None:
        load_trunk_state_dict(model, read_state_dict(weights_path), source=str(weights_path))
    return model
