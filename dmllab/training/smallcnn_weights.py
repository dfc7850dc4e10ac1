"""The SmallCNN's pre-trained weights: the pre-training recipe, where its file lives, and the "synthetic-pretrain"
weights source of :mod:`dmllab.models.weights` (what ``pretrained=True`` means for ``smallcnn``).

The SmallCNN trunk is pre-trained once as a classifier (:class:`dmllab.losses.SoftmaxLoss`, the SM baseline: an
unnormalised linear classifier on the embedding) on the ``pretrain`` split of the synthetic benchmark, whose
classes are disjoint from the metric-learning splits (:func:`pretrain_config`; the training itself is
:func:`dmllab.training.pretrain.ensure_pretrained_smallcnn`). Its state dict lives at
``cache_dir()/weights/smallcnn-synthetic-w<width>.pt`` (width 32: ``smallcnn-synthetic.pt``; draw k > 0:
``...-s<k>.pt``, :func:`dmllab.models.smallcnn.default_smallcnn_weights_path`) with a JSON sidecar holding the
pre-training config hash.

A synthetic draw k > 0 (the dataset's generation seed ``seed``: other classes, other images, and another
pre-training pool) has its own pre-trained trunk: the backbone keyword ``pretrain_seed=k`` pre-trains on draw k's
pre-training pool with trainer seed k, and its fingerprint (the pre-training config hash) keys the runs that start
from it.

The source only reads: a trunk that is not pre-trained yet is a :class:`WeightsNotPreparedError` naming the command
that prepares it. Building a model never trains one; the run store and the study prepare what a run depends on
first (:func:`dmllab.training.pretrain.prepare`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmllab.fileio import CorruptFileError, check_sidecar, set_aside
from dmllab.models.smallcnn import SmallCNN, default_smallcnn_weights_path
from dmllab.models.weights import WEIGHTS_SOURCES, WeightsSource
from dmllab.spec import Spec
from dmllab.training.config import (
    DataConfig,
    ExperimentConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    ScheduleConfig,
    config_hash,
)


class WeightsNotPreparedError(FileNotFoundError):
    """A SmallCNN trunk a run starts from is not pre-trained yet (or its file is stale)."""

    hint = "the run store and `dmllab study` prepare it first; by hand: `dmllab pretrain`"


def pretrain_config(
    width: int = 16, *, image_size: int = 64, epochs: int = 4, seed: int = 0
) -> ExperimentConfig:
    """Classification pre-training of SmallCNN: 64x64 synthetic pre-training pool (100 genus-level classes,
    40-60 images, 80% of them), "quick" transforms, random batches of 64, Adam lr 5e-3, x0.1 for the last 2
    epochs (dmllab choice: 4 epochs of width 16 reach about 8% R@1 on ``pretrain_val``, chance 1%, and about
    38% R@1 on the benchmark's ``val`` species without fine-tuning, where quick ProxyNCA++ fine-tuning reaches
    about 48%: the CUB-with-ImageNet regime; 12 epochs reach about 56% without fine-tuning, leaving
    fine-tuning little to add). ``seed``: the synthetic draw whose pre-training pool is used (0: the default
    draw, whose dataset spec names no seed)."""
    draw = {"seed": int(seed)} if seed else {}
    return ExperimentConfig(
        method="pretrain_softmax",
        dataset="synthetic",
        profile="pretrain",
        data=DataConfig(
            dataset=Spec("synthetic", {"image_size": image_size, **draw}),
            train_split="pretrain",
            val_split="pretrain_val",
            test_split="pretrain_val",
            batch_size=64,
            sampler=Spec("random"),
            transform="quick",
            num_workers=0,
            eval_batch_size=256,
        ),
        model=ModelConfig(backbone=Spec("smallcnn", {"width": width}), pretrained=False, embedding_dim=128),
        loss=Spec("softmax"),
        optim=OptimConfig(name="adam", lr=5e-3, eps=1e-8, grad_clip_value=None),
        schedule=ScheduleConfig(
            epochs=epochs, warmup_epochs=0, scheduler="multistep", milestones=(epochs - 2,)
        ),
        run=RunConfig(device="cpu", two_stage=False, metrics=("recall",), ks=(1,)),
    )


def weights_path(width: int = 16, seed: int = 0) -> Path:
    """Where the pre-trained trunk of ``width`` (and draw ``seed``) lives (the file
    ``build_smallcnn(pretrained=True, width=..., pretrain_seed=...)`` loads)."""
    return default_smallcnn_weights_path(width, seed)


def pretrain_fingerprint(width: int = 16, *, image_size: int = 64, epochs: int = 4, seed: int = 0) -> str:
    """Identity of the pre-trained weights: the pre-training config hash and the synthetic renderer version
    (a changed renderer or recipe retrains, and changes the key of every run that starts from these weights)."""
    from dmllab.data.synthetic import GENERATOR_VERSION

    cfg = pretrain_config(width, image_size=image_size, epochs=epochs, seed=seed)
    return f"{config_hash(cfg)}-g{GENERATOR_VERSION}"


def is_fresh(width: int, seed: int, *, fingerprint: str | None = None, force: bool = False) -> bool:
    """Whether the pre-trained file of ``width`` and draw ``seed`` is there, intact, and of the recipe whose
    ``fingerprint`` is given (default: the standard recipe's), pre-trained on the recipe's torch thread count
    (``run.threads``, part of the fingerprint); a damaged file, or one made on another thread count, is set
    aside, saying so."""
    path = weights_path(width, seed)
    meta_path = path.with_suffix(".json")
    if force or not (path.is_file() and meta_path.is_file()):
        return False
    try:
        check_sidecar(path, "pre-trained weights")  # torch.load checks no CRC: a damaged file is rebuilt
        expected = fingerprint or pretrain_fingerprint(width, seed=seed)
        meta = json.loads(meta_path.read_text())
        if meta.get("config_hash") != expected:
            return False
        threads = pretrain_config(width, seed=seed).run.threads
        if meta.get("torch_threads") != threads:
            raise CorruptFileError(
                f"{meta_path} records {meta.get('torch_threads')} torch threads, but its recipe (and key) says "
                f"{threads}: not served as that trunk"
            )
        return True
    except (CorruptFileError, ValueError) as err:
        set_aside(path, str(err), then="pre-training it again")
        return False


def trunk(backbone_kwargs: Mapping[str, Any]) -> tuple[int, int]:
    """``(width, draw)`` of the SmallCNN a config builds: its ``width`` (else SmallCNN's default) and
    ``pretrain_seed`` (else 0) keywords."""
    default = inspect.signature(SmallCNN).parameters["width"].default
    return int(backbone_kwargs.get("width", default)), int(backbone_kwargs.get("pretrain_seed", 0))


def provide_smallcnn_weights(
    backbone: str, backbone_kwargs: Mapping[str, Any], *, progress: bool = True
) -> Path:
    """Provider of the "synthetic-pretrain" source: the pre-trained file of the config's width and draw.

    Raises WeightsNotPreparedError: not pre-trained yet, or of another recipe."""
    width, draw = trunk(backbone_kwargs)
    if not is_fresh(width, draw):
        draw_flag = f" --seed {draw}" if draw else ""
        raise WeightsNotPreparedError(
            f"the SmallCNN of width {width} (synthetic draw {draw}) is not pre-trained yet ({weights_path(width, draw)}): "
            f"`dmllab pretrain --width {width}{draw_flag}` prepares it (a few minutes on 2 cores)"
        )
    return weights_path(width, draw)


def smallcnn_weights_fingerprint(backbone: str, backbone_kwargs: Mapping[str, Any]) -> str:
    """Fingerprint of the "synthetic-pretrain" source: :func:`pretrain_fingerprint` of the width and draw."""
    width, draw = trunk(backbone_kwargs)
    return pretrain_fingerprint(width, seed=draw)


WEIGHTS_SOURCES.register(
    "synthetic-pretrain",
    WeightsSource(
        backbones=("smallcnn",),
        provide=provide_smallcnn_weights,
        fingerprint=smallcnn_weights_fingerprint,
        description="SmallCNN pre-trained on the synthetic pre-training pool (cached; `dmllab pretrain`)",
    ),
)
