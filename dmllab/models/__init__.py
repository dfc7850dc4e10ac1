"""Models: backbones returning conv feature maps, global poolings (incl. k-max, ProxyNCA++ Eq. 7), embedding heads."""

# ruff: noqa: F401 - the imports are the package's public names

from __future__ import annotations

from dmllab.models.backbones import (
    BACKBONES,
    ConvTrunk,
    InceptionInputTransform,
    build_backbone,
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
from dmllab.models.weights import (
    hub_checkpoint_path,
    imagenet_weights_enum,
    load_trunk_state_dict,
    read_state_dict,
)
