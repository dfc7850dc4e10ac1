"""One trainer for every method: model + loss + optimiser built from an :class:`ExperimentConfig`, epochs
driven by a :class:`StagePlan`, extension through hooks.

Hooks are plain objects with any of these optional methods (no base class needed):

* ``on_train_start(trainer)`` - after the stage is built (model, loss, optimiser exist), before epoch 1;
* ``on_step_end(trainer, info)`` - after ``backward()`` and *before* gradient clipping, ``optimizer.step()``
  and the next ``zero_grad``: parameter ``.grad`` are the raw (unscaled) gradients of this step. ``info`` has
  ``stage, epoch, sched_epoch, step, loss, batch_size, embeddings`` (detached). This is how the notebooks
  measure, e.g., the proxy / embedding gradient-norm ratio (ProxyNCA++ Sec. 3.6);
* ``on_epoch_end(trainer, epoch, metrics)`` - after the epoch's history row and checkpoint are written
  (so raising here simulates a crash after a completed epoch); ``metrics`` is the history row.

Randomness: every epoch reseeds ``torch``, ``numpy``, ``random``, the batch sampler and the DataLoader
generator from ``(seed, stage, epoch)``, so a run resumed from an epoch checkpoint draws exactly the batches
and augmentations of an uninterrupted run, and the same seed on the CPU gives identical metrics - with the
same number of torch threads (``OMP_NUM_THREADS``): convolution kernels reduce in a thread-count-dependent
order, so 1 and 2 threads give different, equally valid runs (provenance.json records ``torch_threads``).
"""

from __future__ import annotations

import inspect
import itertools
import math
import multiprocessing
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from dmllab.profiles import resolve_device
from dmllab.training import schedules
from dmllab.training.config import ExperimentConfig
from dmllab.training.optim import build_optimizer, check_all_params_in_groups, param_groups

_STAGE_IDS = {"stage1": 1, "stage2": 2, "single": 3, "pretrain": 4, "finetune": 5}


class NonFiniteLossError(FloatingPointError):
    """The loss (or the embeddings feeding it) became NaN or inf; the message names stage, epoch and step."""

    hint = "the training diverged: lower the learning rate (--set optim.lr=...) or keep gradient clipping on"


def loader_context(workers: int) -> Any:
    """The multiprocessing context of a DataLoader's ``workers``: fork on Linux, whichever process builds the
    loader; None (the platform's default) without workers or elsewhere. A study's training worker is a spawned
    process (:mod:`dmllab.pipeline.executors`), whose default start method is then spawn as well: its DataLoader
    workers would each start a fresh interpreter that imports torch and dmllab again for every loader, where
    forked workers start at once from the loading process, as under ``dmllab train``."""
    if workers <= 0 or not sys.platform.startswith("linux"):
        return None
    return multiprocessing.get_context("fork")


def resolve_num_workers(value: int | str) -> int:
    """``data.num_workers``: an int as given, or "auto" = one loader process per CPU core but one (at most 8),
    from ``os.cpu_count()``."""
    if value == "auto":
        return max(0, min(8, (os.cpu_count() or 1) - 1))
    return int(value)


def check_embeddings(emb: torch.Tensor, split: str | None, allow_collapsed: bool = False) -> None:
    """Refuse embeddings no metric can be trusted on: NaN/inf, or so large that their float32 squared
    distances overflow (|x|^2 > 3.4e38), the state of a diverged model (NonFiniteEmbeddingError); or collapsed
    onto one point (:mod:`dmllab.metrics.evaluator`, "Safety rules"; CollapsedEmbeddingError), a failed model
    whose metrics would only measure the tie rule. The run store records either like a diverged run.
    ``allow_collapsed``: a fast dev run, whose few steps from a random trunk may well leave the embeddings
    collapsed; it checks the code path, not the model."""
    from dmllab.metrics import CollapsedEmbeddingError, NonFiniteEmbeddingError, is_collapsed

    where = f"split {split!r}" if split else "the evaluated split"
    if not bool(torch.isfinite(emb).all()):
        raise NonFiniteEmbeddingError(
            f"the embeddings of {where} contain NaN or inf: the model diverged, the run is not stored"
        )
    sq = float(emb.double().square().sum(1).max()) if emb.numel() else 0.0
    if sq > torch.finfo(torch.float32).max:
        raise NonFiniteEmbeddingError(
            f"the embeddings of {where} reach |x| = {sq**0.5:.3g}: their squared distances overflow float32, "
            "the model diverged and the run is not stored; lower the learning rate or keep gradient clipping on"
        )
    if not allow_collapsed and is_collapsed(emb):
        raise CollapsedEmbeddingError(
            f"the {emb.shape[0]} embeddings of {where} are collapsed onto one point (every coordinate varies by "
            "less than about 1e-5 of its magnitude): the model failed and the run is not stored; lower the "
            "learning rate or check the loss settings"
        )


@dataclass(frozen=True)
class StagePlan:
    """What one stage trains on and for how long.

    Args:
        name: "stage1", "stage2", "single" (or "pretrain"); part of the per-epoch seed.
        train_split: split to train on; ``eval_split`` evaluated every ``eval_every`` epochs (None: none).
        epochs: schedule epochs (after ``warmup_epochs`` warm-up epochs with the backbone frozen).
        scheduler, milestones: see :func:`dmllab.training.schedules.lr_multiplier`.
    """

    name: str
    train_split: str
    eval_split: str | None
    epochs: int
    warmup_epochs: int
    scheduler: str
    milestones: tuple[int, ...] = ()

    @property
    def total_epochs(self) -> int:
        return self.warmup_epochs + self.epochs


@dataclass
class StageState:
    """Mutable progress of the current stage (saved in checkpoints through ``Trainer.state_dict``)."""

    plan: StagePlan
    epoch: int = 0  # completed epochs in this stage, warm-up included
    rows: list[dict] = field(default_factory=list)


def resolve_amp(amp: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype: None on CPU/MPS and for "off"; "auto" = bf16 on CUDA when supported."""
    if device.type != "cuda" or amp == "off":
        return None
    if amp == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        return torch.float16
    raise ValueError(f"unknown amp {amp!r}; valid: auto, off, bf16, fp16")


def epoch_seed(seed: int, stage: str, epoch: int) -> int:
    """A distinct 63-bit seed per (run seed, stage, epoch), the same on every machine."""
    return (seed * 1_000_003 + _STAGE_IDS.get(stage, 9) * 10_007 + epoch) % (2**63 - 1)


def seed_everything(seed: int) -> torch.Generator:
    """Seed torch, numpy and random; return a fresh torch.Generator seeded the same (for the DataLoader)."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    return torch.Generator().manual_seed(seed)


def _worker_init(worker_id: int) -> None:
    # DataLoader workers get torch seeds from the loader's generator; derive numpy/random from them.
    s = torch.initial_seed() % 2**32
    np.random.seed(s)
    random.seed(s)


def _call_hooks(hooks: Sequence[Any], name: str, *args: Any) -> None:
    for hook in hooks:
        fn = getattr(hook, name, None)
        if fn is not None:
            fn(*args)


class Trainer:
    """Trains one :class:`StagePlan` of an experiment config.

    Args:
        cfg: the experiment config (``run.seed`` is the seed unless ``seed`` is given).
        hooks: objects with optional ``on_train_start`` / ``on_step_end`` / ``on_epoch_end`` (module doc).
        progress: show a tqdm bar per epoch (loss, lr, last validation R@1); False for batch runs.
        seed: overrides ``cfg.run.seed``.
        init_from: a final model file (``{"model", "loss"}`` state dicts, :func:`dmllab.training.run_protocol`'s
            ``final_model``) loaded into the model and the loss of every stage after they are built: a fine-tune
            starts from its parent's weights (:class:`~dmllab.training.config.FinetuneConfig`).
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        *,
        hooks: Iterable[Any] = (),
        progress: bool = True,
        seed: int | None = None,
        init_from: str | os.PathLike | None = None,
    ) -> None:
        from dmllab.training.config import check_value, validate

        self.cfg = validate(cfg)
        self.seed = cfg.run.seed if seed is None else seed
        check_value("run.seed", self.seed)
        self.hooks = list(hooks)
        self.progress = progress
        self.init_from = init_from
        self.device = torch.device(resolve_device(cfg.run.device))
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # fixed input sizes: let cuDNN pick its fastest kernels
        self._persistent: dict[tuple, Any] = {}  # loaders kept across epochs (CUDA with worker processes)
        self.amp_dtype = resolve_amp(cfg.run.amp, self.device)
        cl = cfg.run.channels_last
        self.channels_last = cl == "on" or (cl == "auto" and self.device.type == "cuda")
        self._datasets: dict[tuple[str, bool], Any] = {}
        self._sources: dict[tuple, Any] = {}  # in-memory images / cached frozen-prefix features per split
        # Seconds spent per phase (summed over stages): data, step (forward/backward/update), eval, cache_build.
        self.timings: dict[str, float] = {"data": 0.0, "step": 0.0, "eval": 0.0, "cache_build": 0.0}
        self.model: nn.Module | None = None
        self.loss: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scaler: torch.amp.GradScaler | None = None
        self.state: StageState | None = None
        self._base_alpha: float | None = None
        # run.fast_dev_run (N > 0): N batches per epoch and per evaluation, the batch shrunk to fit tiny data
        self.fast_dev = int(cfg.run.fast_dev_run)
        self.steps = 0  # optimiser steps taken, over every stage
        self.shrunk: list[str] = []  # what a fast dev run shrank to fit the data, one line each

    # ------------------------------------------------------------------------------------------ building
    def dataset(self, split: str, *, train: bool) -> Any:
        """The ``split`` dataset with the train or test transform of ``data.transform`` (built once).

        A fold split name (:func:`dmllab.data.folds.fold_split`, e.g. ``"mlrc:0of4:train"``: the MLRC
        protocol's class-disjoint folds) is the matching :class:`~dmllab.data.folds.ClassSubset` of the
        ``trainval`` split."""
        from dmllab.data.folds import ClassSubset, fold_classes, parse_fold_split

        key = (split, train)
        parsed = parse_fold_split(split)
        if parsed is not None and key not in self._datasets:
            fold, folds, part = parsed
            base = self.dataset(self.cfg.data.trainval_split, train=train)
            self._datasets[key] = ClassSubset(base, fold_classes(base.num_classes, fold, folds, part))
        if key not in self._datasets:
            from dmllab.data import DATASETS, build_dataset, build_transforms

            d = self.cfg.data
            transform = build_transforms(
                d.transform, train=train, lazy=True
            )  # no torchvision import in memory
            kw = dict(d.dataset_kwargs)
            if "progress" in inspect.signature(DATASETS.get(d.dataset)).parameters:
                kw["progress"] = self.progress
            self._datasets[key] = build_dataset(d.dataset, d.root, split, transform=transform, **kw)
        return self._datasets[key]

    def build_model(self) -> nn.Module:
        """``dmllab.models.build_model`` from ``cfg.model``, with the weights that ``pretrained`` resolves to
        (:func:`dmllab.models.weights.resolve_weights`: a file such as the pre-trained SmallCNN, produced first
        if missing, or torchvision's ImageNet weights)."""
        from dmllab.models import build_model
        from dmllab.models.weights import resolve_weights

        m = self.cfg.model
        weights = resolve_weights(
            m.backbone,
            pretrained=m.pretrained,
            weights_path=m.weights_path,
            backbone_kwargs=dict(m.backbone_kwargs),
            progress=self.progress,
        )
        is_file = isinstance(weights, str | os.PathLike)
        weights_path = str(weights) if is_file else None
        pretrained = weights is not None and not is_file
        return build_model(
            backbone=m.backbone,
            embedding_dim=m.embedding_dim,
            pooling=m.pooling,
            k=m.k,
            norm=m.norm,
            norm_position=m.norm_position if m.norm != "none" else None,
            l2_normalize=m.l2_normalize,
            pretrained=pretrained,
            weights_path=weights_path,
            head_init=m.head_init,
            frozen_bn=m.freeze_bn,
            frozen_bn_affine=m.freeze_bn_affine,
            **dict(m.backbone_kwargs),
        )

    def build_loss(self, num_classes: int) -> nn.Module:
        """``dmllab.losses.build_loss`` for ``num_classes`` training classes (Proxy Synthesis wraps it)."""
        from dmllab.losses import ProxySynthesis, build_loss

        lc = self.cfg.loss
        loss = build_loss(
            lc.name, num_classes=num_classes, embedding_dim=self.cfg.model.embedding_dim, **dict(lc.kwargs)
        )
        if lc.synthesis:
            # Wrap the built base loss (not build_loss("proxy_synthesis", ...)): the base may have its own
            # ``alpha`` (Proxy Anchor) which must not collide with the Beta(alpha, alpha) of PS.
            loss = ProxySynthesis(
                loss,
                alpha=lc.ps_alpha,
                mu=lc.ps_mu,
                lam=lc.ps_lambda,
                pairing=lc.ps_pairing,
                embeddings=lc.ps_embeddings,
                proxies=lc.ps_proxies,
            )
        return loss

    def build_regularizer(self) -> nn.Module | None:
        """``loss.regularizer``: None, or a :class:`dmllab.losses.Mixup` that mixes each training batch
        (input_mixup: the images; :func:`dmllab.training.config.validate` rejects it with the feature cache on)."""
        lc = self.cfg.loss
        if lc.regularizer == "none":
            return None
        from dmllab.losses import Mixup

        return Mixup(lc.regularizer, alpha=lc.mixup_alpha)

    def setup(self, plan: StagePlan) -> None:
        """Build the stage: seeded model and loss, optimiser groups (all loss params asserted), scaler."""
        seed_everything(epoch_seed(self.seed, plan.name, 0))
        train_set = self.dataset(plan.train_split, train=True)
        self.model = self.build_model().to(self.device)
        self._freeze_prefix()
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.loss = self.build_loss(train_set.num_classes).to(self.device)
        self.optimizer = build_optimizer(param_groups(self.model, self.loss, self.cfg.optim), self.cfg.optim)
        check_all_params_in_groups(self.optimizer, [self.model, self.loss])
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None
        heat_target = self._heat_target()
        self._base_alpha = float(heat_target.alpha) if heat_target is not None else None
        if (
            self.init_from is not None
        ):  # after the base alpha: a learned alpha is heated from its initial value
            self._load_initial_weights()
        self.state = StageState(plan)

    def _load_initial_weights(self) -> None:
        """Load ``init_from``'s model and loss state (a fine-tune's parent) into the freshly built stage."""
        from dmllab.training.checkpoint import CorruptCheckpointError, load_checkpoint

        state = load_checkpoint(self.init_from, "parent model")
        if not isinstance(state.get("model"), dict) or not isinstance(state.get("loss"), dict):
            raise CorruptCheckpointError(f"parent model {self.init_from} lacks the model or the loss state")
        self.model.load_state_dict(state["model"])
        self.loss.load_state_dict(state["loss"])

    @property
    def precision(self) -> str:
        """The arithmetic of training and evaluation (``run.amp`` resolved on this device): "fp32",
        "bf16 autocast" or "fp16 autocast + loss scaling"; the losses compute in float32 in every case."""
        if self.amp_dtype is None:
            return "fp32"
        return "fp16 autocast + loss scaling" if self.amp_dtype == torch.float16 else "bf16 autocast"

    def _heat_target(self) -> nn.Module | None:
        if self.cfg.schedule.heat_epoch is None:
            return None
        target = getattr(self.loss, "base", self.loss) if self.cfg.loss.synthesis else self.loss
        if not hasattr(target, "alpha"):
            raise ValueError(
                f"schedule.heat_epoch needs a loss with an 'alpha' scale; {self.cfg.loss.name!r} has none"
            )
        return target

    def train_loader(self, plan: StagePlan, epoch: int) -> torch.utils.data.DataLoader:
        """Batches of one epoch: class-balanced (``data.per_class``) or random, seeded by (seed, stage, epoch)."""
        from torch.utils.data import BatchSampler, DataLoader, RandomSampler

        d = self.cfg.data
        ds = self.dataset(plan.train_split, train=True)
        if d.in_memory:
            return self._tensor_batches(plan, epoch)
        s = epoch_seed(self.seed, plan.name, epoch)
        gen = torch.Generator().manual_seed(s)
        batch_size, per_class = self.batch_shape(plan.train_split, ds.labels)
        if per_class:
            from dmllab.data import ClassBalancedSampler

            batches = ClassBalancedSampler(ds.labels, batch_size, per_class, seed=self.seed)
            batches.set_epoch(_STAGE_IDS.get(plan.name, 9) * 100_000 + epoch)
        else:
            batches = BatchSampler(RandomSampler(ds, generator=gen), batch_size, drop_last=True)
        batches = self._first_batches(batches)
        workers = resolve_num_workers(d.num_workers)
        if self._persistent_workers(workers):
            # CUDA with worker processes: one loader for the stage (its workers live across epochs); every
            # sample is augmented from its own seed (epoch seed, position), whatever worker gets it.
            key = ("train", plan.name, plan.train_split)
            if key not in self._persistent:
                holder = _EpochBatches()
                loader = DataLoader(
                    _SeededSamples(ds),
                    batch_sampler=holder,
                    num_workers=workers,
                    pin_memory=True,
                    persistent_workers=True,
                    worker_init_fn=_worker_init,
                    multiprocessing_context=loader_context(workers),
                )
                self._persistent[key] = (loader, holder)
            loader, holder = self._persistent[key]
            holder.set(batches, s)
            return loader
        return DataLoader(
            ds,
            batch_sampler=batches,
            num_workers=workers,
            generator=gen,
            worker_init_fn=_worker_init,
            pin_memory=self.device.type == "cuda",
            multiprocessing_context=loader_context(workers),
        )

    def batch_shape(self, split: str, labels: Any) -> tuple[int, int | None]:
        """``(batch_size, per_class)`` of the training batches of ``split``: ``data.batch_size`` and
        ``data.per_class``; a fast dev run shrinks them to fit a split with fewer classes than a class-balanced
        batch holds, or fewer images than one batch (``batch_size // per_class`` classes capped at the split's
        classes, then ``per_class`` capped so that one batch fits), and records what it shrank in ``shrunk``."""
        d = self.cfg.data
        if not self.fast_dev:
            return d.batch_size, d.per_class
        labels = np.asarray(labels).reshape(-1)
        n, n_classes = len(labels), len(np.unique(labels))
        if d.per_class:
            classes = max(1, min(d.batch_size // d.per_class, n_classes))
            per_class = d.per_class if classes * d.per_class <= n else max(1, n // classes)
            shape: tuple[int, int | None] = (classes * per_class, per_class)
        else:
            shape = (max(1, min(d.batch_size, n)), None)
        if shape != (d.batch_size, d.per_class):

            def fmt(bs: int, pc: int | None) -> str:
                return f"{bs} = {bs // pc} classes x {pc}" if pc else f"{bs} random images"

            note = (
                f"{self.cfg.dataset} {split}: batch {fmt(d.batch_size, d.per_class)} -> {fmt(*shape)} "
                f"({n_classes} classes, {n} images)"
            )
            if note not in self.shrunk:
                self.shrunk.append(note)
        return shape

    def _first_batches(self, batches: Iterable[Any]) -> Any:
        """``batches``, or their first ``run.fast_dev_run`` in a fast dev run."""
        if not self.fast_dev:
            return batches
        return list(itertools.islice(batches, self.fast_dev))

    def _persistent_workers(self, workers: int) -> bool:
        return workers > 0 and self.device.type == "cuda"

    def _sync_free_steps(self) -> bool:
        """On CUDA without progress bar and step hooks nothing needs the loss on the host each step: the
        finite checks and the loss sum stay on the device and are read once per epoch (no host sync per
        step; a NaN step is then reported for its epoch, whose checkpoint is not written)."""
        return (
            self.device.type == "cuda"
            and not self.progress
            and not any(hasattr(h, "on_step_end") for h in self.hooks)
        )

    def eval_loader(self, split: str) -> torch.utils.data.DataLoader:
        from torch.utils.data import DataLoader

        d = self.cfg.data
        if d.in_memory:
            batches = self.source(split, train=False).ordered(d.eval_batch_size)
            return itertools.islice(batches, self.fast_dev) if self.fast_dev else batches
        ds = self.dataset(split, train=False)
        if self.fast_dev:  # the split's first batches (in index order: the first classes, whole)
            ds = torch.utils.data.Subset(ds, range(min(len(ds), self.fast_dev * d.eval_batch_size)))
        workers = resolve_num_workers(d.num_workers)
        if not self._persistent_workers(workers):
            return DataLoader(
                ds,
                batch_size=d.eval_batch_size,
                shuffle=False,
                num_workers=workers,
                multiprocessing_context=loader_context(workers),
            )
        key = ("eval", split)  # no randomness: one loader per split, its workers kept between validations
        if key not in self._persistent:
            self._persistent[key] = DataLoader(
                ds,
                batch_size=d.eval_batch_size,
                shuffle=False,
                num_workers=workers,
                pin_memory=True,
                persistent_workers=True,
                multiprocessing_context=loader_context(workers),
            )
        return self._persistent[key]

    # ------------------------------------------------------------------------ in-memory data, frozen prefix
    def _freeze_prefix(self) -> None:
        """Freeze the first ``model.frozen_blocks`` trunk blocks (no gradient, BatchNorm in eval mode)."""
        n = self.cfg.model.frozen_blocks
        if n == 0:
            return
        backbone = self.model.backbone
        if not hasattr(backbone, "freeze_blocks"):
            raise ValueError(
                f"model.frozen_blocks={n} needs a backbone with blocks (smallcnn); {self.cfg.model.backbone!r} has none"
            )
        backbone.freeze_blocks(n)

    def _uses_feature_cache(self) -> bool:
        d = self.cfg.data
        if d.feature_views and not (d.in_memory and self.cfg.model.frozen_blocks > 0):
            raise ValueError("data.feature_views > 0 needs data.in_memory=true and model.frozen_blocks > 0")
        return d.feature_views > 0

    def source(self, split: str, *, train: bool) -> Any:
        """The in-memory source of ``split`` (``data.in_memory``): :class:`dmllab.data.tensor.InMemoryImages`,
        or with ``data.feature_views`` the frozen prefix's cached features (:class:`~dmllab.data.tensor.FeatureCache`,
        keyed by the prefix weights, so every stage and seed with the same frozen weights shares it)."""
        from dmllab.data.tensor import FeatureCache, InMemoryImages, tensor_digest

        d = self.cfg.data
        ds = self.dataset(split, train=train)
        if not self._uses_feature_cache():
            key: tuple = (split, train)
            if key not in self._sources:
                self._sources[key] = InMemoryImages(ds, d.transform, train=train)
            return self._sources[key]
        n = self.cfg.model.frozen_blocks
        backbone = self.model.backbone
        prefix = backbone.blocks()[:n]
        digest = tensor_digest([t for b in prefix for t in b.state_dict().values()])
        key = (split, train, digest)
        if key not in self._sources:
            cache = FeatureCache(
                lambda x: backbone.forward_blocks(x, 0, n),
                digest,
                ds,
                d.transform,
                train=train,
                views=d.feature_views,
                device=self.device,
            )
            self.timings["cache_build"] += cache.build_seconds
            self._sources[key] = cache
        return self._sources[key]

    def embedder(self) -> nn.Module:
        """The module mapping a batch of the loaders to embeddings: the model, or with cached features the
        trainable blocks + head (:class:`dmllab.models.EmbeddingTail`)."""
        if self.cfg.data.in_memory and self._uses_feature_cache():
            from dmllab.models import EmbeddingTail

            return EmbeddingTail(self.model, self.cfg.model.frozen_blocks)
        return self.model

    def _tensor_batches(self, plan: StagePlan, epoch: int) -> Any:
        """One epoch of in-memory batches: the same index batches as the DataLoader path (class-balanced or
        random, seeded by (seed, stage, epoch)), augmented by torch from one generator; with cached features each
        image uses view ``(offset_i + epoch) % views``, ``offset`` drawn once per (seed, stage)."""
        from torch.utils.data import BatchSampler, RandomSampler

        src = self.source(plan.train_split, train=True)
        s = epoch_seed(self.seed, plan.name, epoch)
        gen = torch.Generator().manual_seed(s)
        batch_size, per_class = self.batch_shape(plan.train_split, src.labels.tolist())
        if per_class:
            from dmllab.data import ClassBalancedSampler

            batches = ClassBalancedSampler(src.labels.tolist(), batch_size, per_class, seed=self.seed)
            batches.set_epoch(_STAGE_IDS.get(plan.name, 9) * 100_000 + epoch)
        else:
            batches = BatchSampler(RandomSampler(range(len(src)), generator=gen), batch_size, drop_last=True)
        batches = self._first_batches(batches)
        if not self._uses_feature_cache():
            batches = list(batches)
            return _Timed(src.batches(batches, gen), self.timings, len(batches))
        offset_gen = torch.Generator().manual_seed(epoch_seed(self.seed, plan.name, 0))
        offsets = torch.randint(src.views, (len(src),), generator=offset_gen)
        views = (offsets + epoch) % src.views

        def feature_batches() -> Any:
            for idx in batches:
                idx = torch.as_tensor(idx, dtype=torch.long)
                yield src.batch(idx, views[idx])

        return _Timed(feature_batches(), self.timings, len(batches))

    # ------------------------------------------------------------------------------------------ schedule
    def _apply_schedule(self, plan: StagePlan, epoch: int) -> dict[str, float]:
        """Set group lrs, backbone freezing (warm-up) and the heated alpha for ``epoch``; return the lrs."""
        sc = self.cfg.schedule
        sched_epoch = epoch - plan.warmup_epochs
        warm = sched_epoch <= 0
        if warm:
            mult = 1.0
        else:
            drops = self.lr_drop_epochs() if plan.scheduler == "plateau" else ()
            mult = schedules.lr_multiplier(
                sched_epoch,
                scheduler=plan.scheduler,
                drops=drops,
                factor=sc.factor,
                milestones=plan.milestones,
                step_size=sc.step_size,
                gamma=sc.gamma,
                heat_epoch=sc.heat_epoch,
                heat_lr_factor=sc.heat_lr_factor,
            )
        lrs = {}
        for g in self.optimizer.param_groups:
            g["lr"] = 0.0 if (warm and g["name"] == "backbone") else g["base_lr"] * mult
            lrs[g["name"]] = g["lr"]
        for p in self.model.backbone.parameters():
            p.requires_grad_(not warm)
        self._freeze_prefix()  # the frozen blocks stay frozen after the warm-up
        # model.freeze_bn_affine: the BN affine parameters stay without gradient after the loop above; without it
        # they train from the end of the warm-up on (the Proxy Anchor release, train.py at epoch == args.warm)
        self.model.refreeze_bn()
        target = self._heat_target()
        if target is not None:
            target.alpha = schedules.loss_alpha(
                max(sched_epoch, 1),
                self._base_alpha,
                heat_epoch=sc.heat_epoch,
                heat_alpha_factor=sc.heat_alpha_factor,
            )
        return lrs

    def val_values(self) -> list[float]:
        """The monitored validation value (``schedule.monitor``: R@1 or the NMI/R@1 harmonic mean) of every
        completed, validated schedule epoch of this stage."""
        monitor = self.cfg.schedule.monitor
        return [
            schedules.monitored_value(r, monitor)
            for r in self.state.rows
            if not r["warmup"] and "val_R@1" in r
        ]

    def lr_drop_epochs(self) -> list[int]:
        """Schedule epochs after which ReduceLROnPlateau dropped the lr, from the monitored validation history."""
        return schedules.plateau_drop_epochs(self.val_values(), patience=self.cfg.schedule.patience)

    # ------------------------------------------------------------------------------------------ training
    def train_epoch(self, plan: StagePlan, epoch: int) -> float:
        """One pass over the epoch's batches; returns the mean loss. Raises NonFiniteLossError on NaN/inf."""
        from tqdm.auto import tqdm

        self.model.train()
        self.loss.train()
        loader = self.train_loader(plan, epoch)
        if not isinstance(loader, _Timed):
            loader = _Timed(loader, self.timings)
        clip = self.cfg.optim.grad_clip_value
        clip_params = list(self.model.parameters())
        if self.cfg.optim.clip_proxies:
            clip_params += list(self.loss.parameters())
        total, count = 0.0, 0
        last = self.state.rows[-1] if self.state.rows else {}
        bar = tqdm(
            loader,
            total=loader.total,
            desc=f"{plan.name} ep {epoch}/{plan.total_epochs}",
            disable=not self.progress,
            leave=False,
            dynamic_ncols=True,
        )
        sched_epoch = epoch - plan.warmup_epochs
        embedder = self.embedder()
        mixup, mix = self.build_regularizer(), None  # PS Table 5 mixup: one draw per batch
        lazy = self._sync_free_steps()
        bad = torch.zeros((), dtype=torch.bool, device=self.device)
        total_t = torch.zeros((), dtype=torch.float64, device=self.device)
        for step, (images, labels) in enumerate(bar, start=1):
            images = images.to(self.device, non_blocking=True)
            if self.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            labels = labels.to(self.device, non_blocking=True)
            t_step = time.perf_counter()
            with torch.autocast(
                self.device.type, dtype=self.amp_dtype or torch.float32, enabled=self.amp_dtype is not None
            ):
                if mixup is None:
                    emb = embedder(images)  # (B, D)
                else:
                    emb, mix = mixup.embed(embedder, images)
            where = f"stage {plan.name}, epoch {epoch} (schedule epoch {sched_epoch}), step {step}"
            if lazy:
                bad |= ~torch.isfinite(emb).all()
            elif not bool(torch.isfinite(emb).all()):
                raise NonFiniteLossError(
                    f"non-finite embeddings at {where}; the last good checkpoint is kept"
                )
            loss = self.loss(emb, labels) if mix is None else mixup.loss(self.loss, emb, labels, mix)
            if lazy:
                bad |= ~torch.isfinite(loss.detach())
                total_t += loss.detach()
                value = math.nan  # not read on the host (no step hook sees it)
            else:
                value = float(loss.detach())
            if not lazy and not math.isfinite(value):
                raise NonFiniteLossError(
                    f"non-finite loss ({value}) at {where}; the last good checkpoint is kept"
                )
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.unscale_(self.optimizer)
            else:
                loss.backward()
            info = {
                "stage": plan.name,
                "epoch": epoch,
                "sched_epoch": sched_epoch,
                "step": step,
                "loss": value,
                "batch_size": int(labels.shape[0]),
                "embeddings": emb.detach(),
            }
            _call_hooks(self.hooks, "on_step_end", self, info)
            if clip is not None:
                torch.nn.utils.clip_grad_value_(clip_params, clip)
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.timings["step"] += time.perf_counter() - t_step
            self.steps += 1
            total += value
            count += 1
            if self.progress:
                postfix = {
                    "loss": f"{total / count:.4f}",
                    "lr": f"{self.optimizer.param_groups[0]['lr']:.2e}",
                }
                if "val_R@1" in last:
                    postfix["val R@1"] = f"{100 * last['val_R@1']:.1f}"
                bar.set_postfix(postfix, refresh=False)  # shown at tqdm's own rate, not redrawn every step
        if count == 0:
            raise ValueError(f"no training batch in {plan.train_split!r} (fewer images than one batch?)")
        if lazy:
            if bool(bad):
                raise NonFiniteLossError(
                    f"non-finite loss or embeddings in stage {plan.name}, epoch {epoch} (schedule epoch "
                    f"{sched_epoch}); the last good checkpoint is kept"
                )
            total = float(total_t)
        return total / count

    def evaluate(
        self,
        split: str | None = None,
        *,
        query_split: str | None = None,
        gallery_split: str | None = None,
        metrics: Sequence[str] | None = None,
        ks: Sequence[int] | None = None,
    ) -> dict[str, float]:
        """Embed and evaluate ``split`` (or ``query_split`` against ``gallery_split``) with dmllab.metrics.

        Metrics are fractions in [0, 1]; ``metrics``/``ks`` default to ``cfg.run``.
        """
        from dmllab.metrics import embed_dataset

        kw = self.metric_kwargs(metrics, ks)

        def embed(name: str) -> tuple[torch.Tensor, torch.Tensor]:
            # the training's precision and memory format; on CUDA the embeddings stay there for the metrics
            emb, lab = embed_dataset(
                self.embedder(),
                self.eval_loader(name),
                self.device,
                amp=self.amp_dtype is not None,
                amp_dtype=self.amp_dtype,
                channels_last=self.channels_last,
                keep_on_device=self.device.type == "cuda",
            )
            check_embeddings(emb, name, allow_collapsed=self.fast_dev > 0)
            return emb, lab

        if query_split is not None:
            q, ql = embed(query_split)
            g, gl = embed(gallery_split)
            return self._metrics(q, ql, kw, gallery=g, gallery_labels=gl)
        emb, lab = embed(split)
        return self._metrics(emb, lab, kw)

    def metric_kwargs(
        self, metrics: Sequence[str] | None = None, ks: Sequence[int] | None = None
    ) -> dict[str, Any]:
        """Keyword arguments of ``dmllab.metrics.evaluate`` from ``cfg.run`` (metrics and ks default to it)."""
        r = self.cfg.run
        return dict(
            metrics=tuple(metrics or r.metrics),
            ks=tuple(ks or r.ks),
            distance=r.distance,
            nmi_average=r.nmi_average,
            allow_collapsed=r.fast_dev_run > 0,  # check_embeddings
        )

    def _metrics(
        self, emb: torch.Tensor, labels: torch.Tensor, kw: dict[str, Any], **gallery: Any
    ) -> dict[str, float]:
        """``dmllab.metrics.evaluate``; with ``run.nmi_l2`` NMI clusters the L2-normalised embeddings (of the
        queries, with a gallery), as Heated-up Softmax Sec. 5.2 states; retrieval uses ``run.distance``, NMI
        ``run.nmi_average``."""
        from dmllab.metrics import evaluate

        if not (self.cfg.run.nmi_l2 and "nmi" in kw["metrics"]):
            return evaluate(emb, labels, **gallery, **kw)
        retrieval = tuple(m for m in kw["metrics"] if m != "nmi")
        out = evaluate(emb, labels, **gallery, **{**kw, "metrics": retrieval})
        out.update(
            evaluate(
                nn.functional.normalize(emb.float(), dim=1),
                labels,
                metrics=("nmi",),
                nmi_average=kw.get("nmi_average", self.cfg.run.nmi_average),
                allow_collapsed=kw.get("allow_collapsed", False),
            )
        )
        return out

    def fit(self, on_checkpoint: Callable[[Trainer], None] | None = None) -> list[dict]:
        """Run the remaining epochs of the set-up stage; returns the stage's history rows.

        After each epoch: the history row, then ``on_checkpoint(self)``, then ``on_epoch_end`` hooks.
        """
        plan = self.state.plan
        from tqdm.auto import tqdm

        if plan.scheduler == "plateau" and (plan.eval_split is None or self.cfg.run.eval_every != 1):
            raise ValueError(
                "the plateau scheduler needs a validation split evaluated every epoch (run.eval_every=1)"
            )
        _call_hooks(self.hooks, "on_train_start", self)
        for epoch in range(self.state.epoch + 1, plan.total_epochs + 1):
            t0 = time.perf_counter()
            seed_everything(epoch_seed(self.seed, plan.name, epoch))
            if (
                self.cfg.optim.fresh_after_warmup
                and plan.warmup_epochs > 0
                and epoch == plan.warmup_epochs + 1
            ):
                self.reset_optimizer()
            lrs = self._apply_schedule(plan, epoch)
            mean_loss = self.train_epoch(plan, epoch)
            sched_epoch = epoch - plan.warmup_epochs
            row: dict[str, Any] = {
                "stage": plan.name,
                "epoch": epoch,
                "sched_epoch": sched_epoch,
                "warmup": sched_epoch <= 0,
                "loss": mean_loss,
                **{f"lr_{k}": v for k, v in lrs.items()},
            }
            if plan.eval_split and (epoch % self.cfg.run.eval_every == 0 or epoch == plan.total_epochs):
                monitor = self.cfg.schedule.monitor
                wanted = ("recall", "nmi") if schedules.monitor_needs_nmi(monitor) else ("recall",)
                t_eval = time.perf_counter()
                val = self.evaluate(plan.eval_split, metrics=wanted)
                self.timings["eval"] += time.perf_counter() - t_eval
                row.update({f"val_{k}": v for k, v in val.items()})
                row["val_monitor"] = schedules.monitored_value(row, monitor)
            row["time_s"] = time.perf_counter() - t0
            self.state.rows.append(row)
            self.state.epoch = epoch
            if self.progress:
                val_txt = f" val R@1 {100 * row['val_R@1']:.2f}" if "val_R@1" in row else ""
                tqdm.write(f"[{plan.name}] epoch {epoch}/{plan.total_epochs} loss {mean_loss:.4f}{val_txt}")
            if on_checkpoint is not None:
                on_checkpoint(self)
            _call_hooks(self.hooks, "on_epoch_end", self, epoch, row)
        return self.state.rows

    def reset_optimizer(self) -> None:
        """Replace the optimiser by a fresh one over the same groups (empty Adam moments and step counts).

        With ``optim.fresh_after_warmup`` this runs at the start of the first schedule epoch: the authors'
        code warms up with a separate optimiser that it then discards. A run resumed after that epoch loads
        the checkpointed (post-warm-up) optimiser state and never resets it again, since the reset is tied
        to the epoch number, not to the start of :meth:`fit`.
        """
        self.optimizer = build_optimizer(param_groups(self.model, self.loss, self.cfg.optim), self.cfg.optim)
        check_all_params_in_groups(self.optimizer, [self.model, self.loss])

    # ------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the stage: model, loss, optimiser, scaler, plan, epoch, rows."""
        return {
            "model": self.model.state_dict(),
            "loss": self.loss.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": None if self.scaler is None else self.scaler.state_dict(),
            "plan": self.state.plan.__dict__,
            "epoch": self.state.epoch,
            "rows": list(self.state.rows),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` into a trainer already :meth:`setup` for the same plan."""
        plan = StagePlan(**{**state["plan"], "milestones": tuple(state["plan"]["milestones"])})
        if plan != self.state.plan:
            raise ValueError(f"checkpoint is for {plan}, the trainer is set up for {self.state.plan}")
        self.model.load_state_dict(state["model"])
        self.loss.load_state_dict(state["loss"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.state.epoch = int(state["epoch"])
        self.state.rows = list(state["rows"])


class _Timed:
    """Wrap a batch iterator, adding the time spent producing batches to ``timings["data"]``."""

    def __init__(self, it: Any, timings: dict[str, float], total: int | None = None) -> None:
        self.total = len(it) if hasattr(it, "__len__") else total
        self.it = iter(it)
        self.timings = timings

    def __iter__(self) -> _Timed:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter()
        try:
            return next(self.it)
        finally:
            self.timings["data"] += time.perf_counter() - t0


class _EpochBatches:
    """A batch sampler whose batches are replaced every epoch (for a loader kept across epochs): yields lists
    of ``(index, seed)`` with a distinct seed per position of the epoch."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.seed = 0

    def set(self, batches: Iterable[Iterable[int]], seed: int) -> None:
        self.batches = [list(b) for b in batches]
        self.seed = seed

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Any:
        pos = 0
        for batch in self.batches:
            yield [(int(i), (self.seed * 1_000_003 + pos + k) % (2**63 - 1)) for k, i in enumerate(batch)]
            pos += len(batch)


class _SeededSamples(torch.utils.data.Dataset):
    """``dataset[index]`` after seeding torch, numpy and random from the sample's own seed."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: tuple[int, int]) -> Any:
        index, seed = item
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        return self.dataset[index]
