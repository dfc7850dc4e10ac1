"""Pre-training the SmallCNN once on the synthetic pre-training pool (the quick profile's "ImageNet"), and
preparing what a run depends on before it trains.

The recipe, the file and the weights source are :mod:`dmllab.training.smallcnn_weights`; this module trains the
trunk with the ordinary :class:`~dmllab.training.trainer.Trainer` (single stage, validation R@1 on
``pretrain_val``) and saves its state dict atomically, under a file lock, with a JSON sidecar holding the
pre-training config hash: a changed pre-training config is retrained, an unchanged one is reused.

:func:`prepare` is what the run store calls before training a run (and the study before its training phase):
the pre-trained trunk a run starts from is a dependency, prepared first and announced with its cost, never a side
effect of building a model.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dmllab.fileio import first_use, write_text_atomic
from dmllab.locks import exclusive
from dmllab.training.config import ExperimentConfig, run_threads
from dmllab.training.protocol import save_atomic
from dmllab.training.smallcnn_weights import (
    is_fresh,
    pretrain_config,
    pretrain_fingerprint,
    trunk,
    weights_path,
)
from dmllab.training.trainer import StagePlan, Trainer


class _FirstUse:
    """Trainer hook: from the pace of optimiser steps :attr:`FROM` to :attr:`TO` (the first ones also start the
    data pipeline), says once (:func:`dmllab.fileio.first_use`) what is being built and how long all ``epochs``
    take."""

    FROM, TO = 2, 8

    def __init__(self, what: str, epochs: int, batch_size: int) -> None:
        self.what, self.epochs, self.batch_size = what, epochs, batch_size
        self.start, self.steps = 0.0, 0

    def on_step_end(self, trainer: Any, info: Mapping[str, Any]) -> None:
        self.steps += 1
        if self.steps == self.FROM:
            self.start = time.perf_counter()
        elif self.steps == self.TO:
            per_epoch = -(
                -len(trainer.data.dataset(trainer.cfg.data.train_split, train=True)) // self.batch_size
            )
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
    if is_fresh(width, seed, fingerprint=h, force=force):
        return path
    waiting = f"the SmallCNN weights {path} are being pre-trained by another process ({{}}): waiting for them"
    with exclusive(path.with_suffix(".lock"), waiting=waiting.format):
        if is_fresh(width, seed, fingerprint=h, force=force):  # another process finished while we waited
            return path
        t0 = time.perf_counter()
        d, s = cfg.data, cfg.schedule
        what = f"pre-training the SmallCNN trunk (width {width}, {s.epochs} epochs, synthetic draw {seed}) into {path}"
        announce = _FirstUse(what, s.epochs, d.batch_size)
        with run_threads(cfg):  # the recipe's thread count, part of its fingerprint
            trainer = Trainer(cfg, progress=progress, seed=int(seed), hooks=(announce,))
            trainer.setup(
                StagePlan("pretrain", d.train_split, d.val_split, s.epochs, 0, s.scheduler, s.milestones)
            )
            rows = trainer.fit()
            threads = torch_threads()
        wall = time.perf_counter() - t0
        save_atomic(trainer.model.backbone.state_dict(), path)  # with its checksum sidecar
        meta = {
            "config_hash": h,
            "config": cfg.to_dict(),
            "torch_threads": threads,
            "wall_time_s": wall,
            "history": rows,
        }
        write_text_atomic(meta_path, json.dumps(meta, indent=2))
    return path


def torch_threads() -> int:
    """The torch threads this process runs on now."""
    import torch

    return torch.get_num_threads()


def _trunk_of(cfg: ExperimentConfig) -> tuple[int, int] | None:
    m = cfg.model
    if m.backbone.name != "smallcnn" or not m.pretrained or m.weights_path is not None:
        return None
    return trunk(m.backbone.kw)


def dependencies(cfgs: Iterable[ExperimentConfig]) -> list[tuple[int, int]]:
    """The pre-trained SmallCNN trunks, ``(width, draw)`` sorted, that ``cfgs`` start from and that are not
    prepared yet: what a study pre-trains before its training phase."""
    needed = {t for t in map(_trunk_of, cfgs) if t is not None}
    return sorted(t for t in needed if not is_fresh(*t))


def prepare(cfg: ExperimentConfig, *, progress: bool = True) -> None:
    """Prepare what ``cfg`` reads and does not build itself: the pre-trained SmallCNN of its width and draw when
    it starts from one (``pretrained=True`` without a ``weights_path``). A no-op when it is there."""
    for width, draw in dependencies([cfg]):
        ensure_pretrained_smallcnn(width=width, progress=progress, seed=draw)
