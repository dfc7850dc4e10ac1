"""Pre-training the small CNN once on the synthetic pre-training pool (the quick profile's "ImageNet").

The SmallCNN trunk is trained as a classifier (:class:`dmllab.losses.SoftmaxLoss`, the SM baseline: an
unnormalised linear classifier on the embedding) on the ``pretrain`` split of the synthetic benchmark, whose
classes are disjoint from the metric-learning splits, through the same :class:`Trainer` (single stage,
validation R@1 on ``pretrain_val``). The trunk's state dict is saved atomically, under a file lock, to
``cache_dir()/weights/smallcnn-synthetic-w<width>.pt`` (width 32: ``smallcnn-synthetic.pt``; see
:func:`dmllab.models.smallcnn.default_smallcnn_weights_path`), with a JSON sidecar holding the pre-training
config hash: a changed pre-training config is retrained, an unchanged one is reused.

A synthetic draw k > 0 (the dataset's generation seed, ``dataset_kwargs`` ``seed``: other classes, other
images, and another pre-training pool) has its own pre-trained trunk: the backbone keyword ``pretrain_seed=k``
pre-trains on draw k's pre-training pool with trainer seed k into ``...-s<k>.pt``, and its fingerprint (the
pre-training config hash) keys the runs that start from it. Draw 0 is the default and keeps its file and hash.

These weights are the "synthetic-pretrain" source of :mod:`dmllab.models.weights` (what ``pretrained=True``
means for ``smallcnn``): :func:`provide_smallcnn_weights` and :func:`smallcnn_weights_fingerprint` are its
provider and fingerprint, which the weights module imports by name when they are first needed. So the trainer
builds every model the same way and never imports this module, while this module uses the trainer.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from dmllab.fileio import CorruptFileError, check_sidecar, first_use, set_aside
from dmllab.locks import exclusive
from dmllab.models.smallcnn import SmallCNN, default_smallcnn_weights_path
from dmllab.training.config import (
    DataConfig,
    ExperimentConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    ScheduleConfig,
    config_hash,
    pairs,
)
from dmllab.training.protocol import _save_atomic
from dmllab.training.trainer import StagePlan, Trainer


def pretrain_config(
    width: int = 16, *, image_size: int = 64, epochs: int = 4, seed: int = 0
) -> ExperimentConfig:
    """Classification pre-training of SmallCNN: 64x64 synthetic pre-training pool (100 genus-level classes,
    40-60 images, 80% of them), "quick" transforms, random batches of 64, Adam lr 5e-3, x0.1 for the last 2
    epochs (dmllab choice: 4 epochs of width 16 reach about 8% R@1 on ``pretrain_val``, chance 1%, and about
    38% R@1 on the benchmark's ``val`` species without fine-tuning, where quick ProxyNCA++ fine-tuning reaches
    about 48%: the CUB-with-ImageNet regime; 12 epochs reach about 56% without fine-tuning, leaving
    fine-tuning little to add). ``seed``: the synthetic draw whose pre-training pool is used (0: the default
    draw; the config of draw 0 names no seed, so its hash is the one it always had)."""
    draw = {"seed": int(seed)} if seed else {}
    return ExperimentConfig(
        method="pretrain_softmax",
        dataset="synthetic",
        profile="pretrain",
        data=DataConfig(
            dataset="synthetic",
            train_split="pretrain",
            val_split="pretrain_val",
            test_split="pretrain_val",
            batch_size=64,
            per_class=None,
            transform="quick",
            num_workers=0,
            eval_batch_size=256,
            dataset_kwargs=pairs(image_size=image_size, **draw),
        ),
        model=ModelConfig(
            backbone="smallcnn", pretrained=False, embedding_dim=128, backbone_kwargs=pairs(width=width)
        ),
        loss=LossConfig(name="softmax"),
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


class _FirstUse:
    """Trainer hook: from the pace of optimiser steps :attr:`FROM` to :attr:`TO` (the first ones also start the
    data pipeline), says once (:func:`dmllab.fileio.first_use`) what is being built and how long all ``epochs``
    take."""

    FROM, TO = 2, 8

    def __init__(self, what: str, epochs: int, batch_size: int) -> None:
        self.what, self.epochs, self.batch_size = what, epochs, batch_size
        self.start, self.steps = 0.0, 0

    def on_step_end(self, trainer: Trainer, info: Mapping[str, Any]) -> None:
        self.steps += 1
        if self.steps == self.FROM:
            self.start = time.perf_counter()
        elif self.steps == self.TO:
            per_epoch = -(-len(trainer.dataset(trainer.cfg.data.train_split, train=True)) // self.batch_size)
            pace = (time.perf_counter() - self.start) / (self.TO - self.FROM)
            first_use(self.what, pace * per_epoch * self.epochs)


def ensure_pretrained_smallcnn(
    width: int = 16,
    *,
    image_size: int = 64,
    epochs: int = 4,
    progress: bool = True,
    force: bool = False,
    seed: int = 0,
) -> Path:
    """Return the pre-trained SmallCNN weights file of ``width`` and synthetic draw ``seed``, pre-training it
    first if missing or stale (module doc)."""
    cfg = pretrain_config(width, image_size=image_size, epochs=epochs, seed=seed)
    h = pretrain_fingerprint(width, image_size=image_size, epochs=epochs, seed=seed)
    path = weights_path(width, seed)
    meta_path = path.with_suffix(".json")
    path.parent.mkdir(parents=True, exist_ok=True)

    def fresh() -> bool:
        if force or not (path.is_file() and meta_path.is_file()):
            return False
        try:
            check_sidecar(path, "pre-trained weights")  # torch.load checks no CRC: a damaged file is rebuilt
            return json.loads(meta_path.read_text()).get("config_hash") == h
        except (CorruptFileError, ValueError) as err:
            set_aside(path, str(err), then="pre-training it again")
            return False

    if fresh():
        return path
    waiting = f"the SmallCNN weights {path} are being pre-trained by another process ({{}}): waiting for them"
    with exclusive(path.with_suffix(".lock"), waiting=waiting.format):
        if fresh():  # another process finished while we waited
            return path
        t0 = time.perf_counter()
        d, s = cfg.data, cfg.schedule
        what = f"pre-training the SmallCNN trunk (width {width}, {s.epochs} epochs, seed {seed}) into {path}"
        announce = _FirstUse(what, s.epochs, d.batch_size)
        trainer = Trainer(replace(cfg), progress=progress, seed=int(seed), hooks=(announce,))
        plan = StagePlan("pretrain", d.train_split, d.val_split, s.epochs, 0, s.scheduler, s.milestones)
        trainer.setup(plan)
        rows = trainer.fit()
        wall = time.perf_counter() - t0
        _save_atomic(trainer.model.backbone.state_dict(), path)  # with its checksum sidecar
        meta = {"config_hash": h, "config": cfg.to_dict(), "wall_time_s": wall, "history": rows}
        tmp_meta = meta_path.with_name(f".{meta_path.name}.tmp-{os.getpid()}")
        tmp_meta.write_text(json.dumps(meta, indent=2))
        os.replace(tmp_meta, meta_path)
    return path


# ------------------------------------------------------------------- the "synthetic-pretrain" weights source
def _width(backbone_kwargs: Mapping[str, Any]) -> int:
    """The SmallCNN width a config builds: its ``width`` keyword, else SmallCNN's own default."""
    default = inspect.signature(SmallCNN).parameters["width"].default
    return int(backbone_kwargs.get("width", default))


def _draw(backbone_kwargs: Mapping[str, Any]) -> int:
    """The synthetic draw a config's trunk was pre-trained on: its ``pretrain_seed`` keyword, else 0."""
    return int(backbone_kwargs.get("pretrain_seed", 0))


def provide_smallcnn_weights(
    backbone: str, backbone_kwargs: Mapping[str, Any], *, progress: bool = True
) -> Path:
    """Provider of the "synthetic-pretrain" weights source (:mod:`dmllab.models.weights`): the pre-trained
    file for the config's width and draw, pre-trained first if missing or stale."""
    draw = _draw(backbone_kwargs)
    extra = {"seed": draw} if draw else {}
    return ensure_pretrained_smallcnn(width=_width(backbone_kwargs), progress=progress, **extra)


def smallcnn_weights_fingerprint(backbone: str, backbone_kwargs: Mapping[str, Any]) -> str:
    """Fingerprint of the "synthetic-pretrain" weights source: :func:`pretrain_fingerprint` of the width and
    draw."""
    return pretrain_fingerprint(_width(backbone_kwargs), seed=_draw(backbone_kwargs))
