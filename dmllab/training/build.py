"""One builder: a run config's components as objects, for the trainer, ``export``, ``evaluate`` and the tuning.

* :func:`build_model`: the embedding network of ``cfg.model`` with the weights its ``pretrained`` resolves to
  (:func:`dmllab.models.weights.resolve_weights`); never trains anything: pre-trained weights a run depends on
  are prepared first (:func:`dmllab.training.pretrain.prepare`; the run store and the study do).
* :func:`build_loss`: the loss spec (wrappers around their built base) for a number of training classes.
* :func:`build_callbacks`: the callbacks ``cfg.callbacks`` switches on (:data:`dmllab.training.callbacks.CALLBACKS`).
* :func:`check`: every component built once at a toy size, so that each constructor checks its own arguments
  before any training starts (the config knows no component's ranges).
"""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from dmllab.training import smallcnn_weights  # noqa: F401 - registers the SmallCNN's weights source
from dmllab.training.callbacks import build_callbacks, check_callback_losses  # noqa: F401 - the trainer builds them here
from dmllab.training.config import ExperimentConfig, ModelConfig, validate


def model_kwargs(model: ModelConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`dmllab.models.build_model` for ``model`` (weights aside)."""
    return dict(
        backbone=model.backbone.name,
        embedding_dim=model.embedding_dim,
        pooling=model.pooling.name,
        norm=model.norm,
        norm_position=model.norm_position if model.norm != "none" else None,
        l2_normalize=model.l2_normalize,
        head_init=model.head_init,
        frozen_bn=model.freeze_bn,
        frozen_bn_affine=model.freeze_bn_affine,
        **model.pooling.kw,
        **model.backbone.kw,
    )


def build_model(model: ModelConfig, *, progress: bool = False, weights: bool = True) -> nn.Module:
    """The embedding network of ``model``: backbone -> pooling -> [norm] -> Linear -> [L2], from the weights that
    ``pretrained`` resolves to (a file, e.g. the pre-trained SmallCNN, or torchvision's ImageNet weights);
    ``weights=False`` builds it without (random initialisation, the weights to be loaded by the caller).

    Raises:
        WeightsNotPreparedError: pre-trained weights that must be prepared first
            (:func:`dmllab.training.pretrain.prepare`).
    """
    from dmllab.models import build_model as build_net
    from dmllab.models.weights import resolve_weights

    resolved = None
    if weights:
        resolved = resolve_weights(
            model.backbone.name,
            pretrained=model.pretrained,
            weights_path=model.weights_path,
            backbone_kwargs=model.backbone.kw,
            progress=progress,
        )
    is_file = isinstance(resolved, str | os.PathLike)
    return build_net(
        pretrained=resolved is not None and not is_file,
        weights_path=str(resolved) if is_file else None,
        **model_kwargs(model),
    )


def freeze_prefix(model: nn.Module, blocks: int) -> None:
    """Freeze the first ``blocks`` trunk blocks of ``model`` (no gradient, BatchNorm in eval mode)."""
    if blocks == 0:
        return
    if not hasattr(model.backbone, "freeze_blocks"):
        raise ValueError(
            f"model.frozen_blocks={blocks} needs a backbone with blocks (smallcnn); "
            f"{type(model.backbone).__name__} has none"
        )
    model.backbone.freeze_blocks(blocks)


def frozen_prefix(model: nn.Module, cfg: ExperimentConfig) -> Any:
    """The frozen trunk prefix whose outputs the data path caches (``data.feature_views``):
    ``(forward(x), digest of its weights)`` (:data:`dmllab.data.loaders.Prefix`), else None."""
    d, n = cfg.data, cfg.model.frozen_blocks
    if not d.feature_views:
        return None
    if not (d.in_memory and n > 0):
        raise ValueError("data.feature_views > 0 needs data.in_memory=true and model.frozen_blocks > 0")
    from dmllab.data.tensor import tensor_digest

    backbone = model.backbone
    digest = tensor_digest([t for b in backbone.blocks()[:n] for t in b.state_dict().values()])
    return (lambda x: backbone.forward_blocks(x, 0, n)), digest


def embedder(model: nn.Module, cfg: ExperimentConfig) -> nn.Module:
    """The module mapping a batch of the data path to embeddings: ``model``, or with cached features its trainable
    blocks + head (:class:`dmllab.models.EmbeddingTail`)."""
    if cfg.data.feature_views:
        from dmllab.models import EmbeddingTail

        return EmbeddingTail(model, cfg.model.frozen_blocks)
    return model


def build_loss(cfg: ExperimentConfig, num_classes: int) -> nn.Module:
    """The loss of ``cfg`` (:func:`dmllab.losses.build_loss` of its spec) for ``num_classes`` training classes."""
    from dmllab.losses import build_loss as build

    return build(cfg.loss, num_classes=num_classes, embedding_dim=cfg.model.embedding_dim)


def check(cfg: ExperimentConfig) -> ExperimentConfig:
    """Reject a config whose components cannot be built: :func:`~dmllab.training.config.validate`, then the loss,
    the pooling, the sampler and the callbacks built at a toy size, each constructor checking its own arguments
    (the backbone and the dataset are checked by name and keywords only: building them reads weights or
    images). Returns ``cfg``.

    Raises ConfigValueError: naming the component's path and the constructor's complaint."""
    from dmllab.data import SAMPLERS
    from dmllab.models import build_pooling
    from dmllab.validation import ConfigValueError

    validate(cfg)
    d = cfg.data

    def sampler() -> Any:  # over a toy split of twice the batch, class-balanced where it can be
        per_class = d.per_class if isinstance(d.per_class, int) and d.per_class > 0 else 1
        labels = [c for c in range(max(2, d.batch_size // per_class)) for _ in range(per_class)]
        return SAMPLERS.get(d.sampler.name)(labels * 2, d.batch_size, seed=0, **d.sampler.kw)

    parts: list[tuple[str, Any]] = [
        ("loss", lambda: build_loss(cfg, num_classes=4)),
        ("model.pooling", lambda: build_pooling(cfg.model.pooling.name, **cfg.model.pooling.kw)),
        ("data.sampler", sampler),
        ("callbacks", lambda: check_callback_losses(cfg)),
    ]
    for path, make in parts:
        try:
            make()
        except (ValueError, TypeError) as err:
            raise ConfigValueError(f"{path}: {err}") from None
    return cfg
