"""Models: backbones returning conv feature maps, global poolings (incl. k-max, ProxyNCA++ Eq. 7), embedding heads."""

from __future__ import annotations

from dmllab.models.backbones import (
    BACKBONES,
    ConvTrunk,
    InceptionInputTransform,
    build_backbone,
    imagenet_weights_enum,
    list_backbones,
)
from dmllab.models.heads import HEAD_INITS, NORM_POSITIONS, NORMS, EmbeddingHead, ScaledBatchNorm1d
from dmllab.models.net import EmbeddingNet, EmbeddingTail, build_model, freeze_batchnorm, unfreeze_batchnorm
from dmllab.models.pooling import (
    POOLINGS,
    GlobalAvgMaxPool2d,
    GlobalAvgPool2d,
    GlobalKMaxPool2d,
    GlobalMaxPool2d,
    build_pooling,
    global_kmax_pool2d,
    list_poolings,
)
from dmllab.models.smallcnn import SmallCNN, build_smallcnn, default_smallcnn_weights_path
from dmllab.models.weights import hub_checkpoint_path, load_trunk_state_dict, read_state_dict

__all__ = [
    "BACKBONES",
    "POOLINGS",
    "NORMS",
    "NORM_POSITIONS",
    "HEAD_INITS",
    "ConvTrunk",
    "InceptionInputTransform",
    "SmallCNN",
    "EmbeddingHead",
    "EmbeddingNet",
    "EmbeddingTail",
    "ScaledBatchNorm1d",
    "GlobalAvgPool2d",
    "GlobalMaxPool2d",
    "GlobalAvgMaxPool2d",
    "GlobalKMaxPool2d",
    "global_kmax_pool2d",
    "build_backbone",
    "build_model",
    "build_pooling",
    "build_smallcnn",
    "list_backbones",
    "list_poolings",
    "freeze_batchnorm",
    "unfreeze_batchnorm",
    "default_smallcnn_weights_path",
    "imagenet_weights_enum",
    "hub_checkpoint_path",
    "load_trunk_state_dict",
    "read_state_dict",
]
