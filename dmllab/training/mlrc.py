"""The MLRC protocol ("A Metric Learning Reality Check", Musgrave, Belongie, Lim, ECCV 2020), as used by
Proxy Synthesis Table 4 and Tables G, I, K, for any loss of dmllab.

Protocol (PS supplement C.2 "MLRC Evaluation"; MLRC Sec. 4):

* the first half of the classes (dmllab's ``trainval`` split) is split into ``folds`` = 4 class-disjoint
  folds (contiguous blocks of class ids); for fold f a model is trained on the other folds' classes and
  validated on fold f's classes;
* each fold model is a ``embedding_dim`` = 128-d network trained with batch 32 = 8 classes x 4 images and
  RMSprop (PS: lr 1e-6 on BN-Inception; the lr is left to the config unless ``lr`` is given, since 1e-6 does
  not move the quick profile's small CNN);
* the test half (``test`` split) is embedded by every fold model; P@1, R-Precision and MAP@R (leave-one-out,
  ``dmllab.metrics.evaluate(metrics=("mlrc",))``) are reported for the **concatenated** embedding
  (each 128-d embedding L2-normalised, concatenated to 512-d and normalised again: "concatenated and
  l2-normalized of 128-dim embeddings of the 4 models") and for the **separated** 128-d embeddings (mean of
  the per-fold values);
* the whole is repeated ``repetitions`` times (PS: 10) with seeds ``seed + r``; the result reports each
  repetition and the mean with a 95% t-interval half-width across repetitions.

Fold models are trained by the ordinary :class:`~dmllab.training.trainer.Trainer` (one single stage of
``schedule.epochs`` epochs with the config's scheduler, no stage 2). With ``select_best`` the weights of the
epoch with the best monitored validation value (``schedule.monitor`` on the fold's validation classes) are
kept, the MLRC practice of early stopping on validation; otherwise the last epoch's. Fold splits are added by
a thin wrapper (:class:`ClassSubset`) around the ``trainval`` dataset, so no dataset class changes. The 50-trial
hyper-parameter search of MLRC/PS is not part of this function (run it over configs).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from dmllab.training.config import ExperimentConfig, config_hash
from dmllab.training.trainer import StagePlan, Trainer

__all__ = [
    "MLRC_METRICS",
    "ClassSubset",
    "FoldTrainer",
    "MLRCResult",
    "MLRCSettings",
    "class_folds",
    "fold_split",
    "mlrc_config",
    "run_mlrc",
]

MLRC_METRICS = ("P@1", "RP", "MAP@R")


@dataclass(frozen=True)
class MLRCSettings:
    """MLRC protocol settings (defaults: PS supplement C.2 / MLRC).

    Args:
        folds: class-disjoint folds of the ``trainval`` classes (4).
        run_folds: which folds to train (None: all); the quick profile may train fewer and must say so.
        repetitions: repetitions of the whole protocol (PS: 10), seeds ``seed + r``.
        embedding_dim: per-fold embedding size (128); batch_size, per_class: 32 = 8 x 4.
        optimizer: "rmsprop"; lr: None keeps the config's lr (PS: 1e-6 with BN-Inception).
        select_best: keep the best validation epoch's weights (True) or the last epoch's.
        apply_architecture: set ``embedding_dim``/batch/optimiser on the config (False: use the config as is).
    """

    folds: int = 4
    run_folds: tuple[int, ...] | None = None
    repetitions: int = 1
    embedding_dim: int = 128
    batch_size: int = 32
    per_class: int = 4
    optimizer: str = "rmsprop"
    lr: float | None = None
    select_best: bool = True
    apply_architecture: bool = True


@dataclass
class MLRCResult:
    """``metrics``: mean over repetitions, keys ``concat_P@1`` ... ``sep_MAP@R`` (fractions in [0, 1]);
    ``ci95``: the 95% t-interval half-widths (0 with one repetition); ``repetitions``: one dict per
    repetition with the concatenated, separated and per-fold values; ``settings`` and provenance."""

    metrics: dict[str, float]
    ci95: dict[str, float]
    repetitions: list[dict[str, Any]]
    settings: MLRCSettings
    config_hash: str
    seed: int
    wall_time_s: float
    folds_trained: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def class_folds(num_classes: int, folds: int) -> list[list[int]]:
    """Contiguous, class-disjoint blocks of the labels 0..num_classes-1 (sizes differ by at most one)."""
    if folds < 2 or folds > num_classes:
        raise ValueError(f"folds must be in [2, {num_classes}] for {num_classes} classes; got {folds}")
    bounds = [round(i * num_classes / folds) for i in range(folds + 1)]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(folds)]


def fold_split(fold: int, folds: int, part: str) -> str:
    """The split name of a fold: ``"mlrc:<fold>of<folds>:train"`` or ``...:val`` (folds counted from 0)."""
    if part not in ("train", "val"):
        raise ValueError(f"part must be 'train' or 'val'; got {part!r}")
    return f"mlrc:{fold}of{folds}:{part}"


def _parse_fold_split(split: str) -> tuple[int, int, str] | None:
    if not split.startswith("mlrc:"):
        return None
    _, spec, part = split.split(":")
    fold, folds = spec.split("of")
    return int(fold), int(folds), part


class ClassSubset:
    """The images of ``dataset`` whose label is in ``classes``, relabelled 0..len(classes)-1 in that order.

    Follows the dataset contract (``labels``, ``num_classes``, ``class_ids``, ``(image, label)`` items) and
    exposes ``images`` when the wrapped dataset has them (the in-memory data path).
    """

    def __init__(self, dataset: Any, classes: Sequence[int]) -> None:
        self.dataset = dataset
        remap = {int(c): i for i, c in enumerate(classes)}
        self.indices = [i for i, y in enumerate(dataset.labels) if int(y) in remap]
        self.labels = [remap[int(dataset.labels[i])] for i in self.indices]
        self.class_ids = [dataset.class_ids[c] for c in classes]
        self.split = f"{getattr(dataset, 'split', '?')}[{len(classes)} classes]"

    @property
    def num_classes(self) -> int:
        return len(self.class_ids)

    @property
    def images(self) -> Any:
        return self.dataset.images[self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image, _ = self.dataset[self.indices[index]]
        return image, self.labels[index]

    def __repr__(self) -> str:
        return f"ClassSubset({self.dataset!r}, images={len(self)}, classes={self.num_classes})"


class FoldTrainer(Trainer):
    """A :class:`Trainer` that also understands the fold split names of :func:`fold_split`: fold f's
    ``train`` part is the ``trainval`` classes outside block f, its ``val`` part block f."""

    def dataset(self, split: str, *, train: bool) -> Any:
        parsed = _parse_fold_split(split)
        if parsed is None:
            return super().dataset(split, train=train)
        key = (split, train)
        if key not in self._datasets:
            fold, folds, part = parsed
            base = super().dataset(self.cfg.data.trainval_split, train=train)
            blocks = class_folds(base.num_classes, folds)
            classes = (
                blocks[fold] if part == "val" else [c for i, b in enumerate(blocks) if i != fold for c in b]
            )
            self._datasets[key] = ClassSubset(base, classes)
        return self._datasets[key]


class _KeepBest:
    """on_epoch_end hook: a CPU copy of the model's weights at the best monitored validation value."""

    def __init__(self) -> None:
        self.best: float | None = None
        self.state: dict[str, torch.Tensor] | None = None
        self.epoch: int | None = None

    def on_epoch_end(self, trainer: Trainer, epoch: int, row: dict) -> None:
        value = row.get("val_monitor")
        if value is None or row.get("warmup"):
            return
        if self.best is None or value > self.best:
            self.best, self.epoch = float(value), epoch
            self.state = {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}


def mlrc_config(cfg: ExperimentConfig, settings: MLRCSettings = MLRCSettings()) -> ExperimentConfig:
    """``cfg`` with the MLRC architecture and optimiser (128-d, batch 32 = 8 x 4, RMSprop[, lr]), single
    stage, MLRC metrics; unchanged architecture when ``settings.apply_architecture`` is False."""
    if settings.apply_architecture:
        optim = replace(cfg.optim, name=settings.optimizer)
        if settings.lr is not None:
            scale = settings.lr / cfg.optim.lr  # keep the config's embedding/proxy lr ratios
            optim = replace(
                optim,
                lr=settings.lr,
                lr_embedding=None if cfg.optim.lr_embedding is None else cfg.optim.lr_embedding * scale,
                lr_proxies=None if cfg.optim.lr_proxies is None else cfg.optim.lr_proxies * scale,
            )
        cfg = replace(
            cfg,
            model=replace(cfg.model, embedding_dim=settings.embedding_dim),
            data=replace(cfg.data, batch_size=settings.batch_size, per_class=settings.per_class),
            optim=optim,
        )
    return replace(cfg, run=replace(cfg.run, two_stage=False, metrics=("mlrc",)))


def _t95(n: int) -> float:
    """Two-sided 95% Student-t quantile for n - 1 degrees of freedom (n >= 2)."""
    from scipy import stats

    return float(stats.t.ppf(0.975, n - 1))


def _embed_test(trainer: Trainer, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    from dmllab.metrics import embed_dataset

    return embed_dataset(trainer.model, trainer.eval_loader(split), trainer.device)


def run_mlrc(
    cfg: ExperimentConfig,
    settings: MLRCSettings = MLRCSettings(),
    *,
    seed: int | None = None,
    progress: bool = True,
    hooks: tuple = (),
) -> MLRCResult:
    """Run the MLRC protocol for ``cfg`` (any method/loss) and return its metrics (module docstring)."""
    from dmllab.metrics import evaluate

    if settings.repetitions < 1:
        raise ValueError(f"repetitions must be >= 1; got {settings.repetitions}")
    run_folds = tuple(range(settings.folds)) if settings.run_folds is None else tuple(settings.run_folds)
    if not run_folds or any(not 0 <= f < settings.folds for f in run_folds):
        raise ValueError(f"run_folds must be folds in [0, {settings.folds}); got {settings.run_folds}")
    cfg = mlrc_config(cfg, settings)
    seed = cfg.run.seed if seed is None else seed
    t0 = time.perf_counter()
    test_split = cfg.data.test_split
    if test_split is None:
        raise ValueError("the MLRC protocol needs a test split (query/gallery datasets are not supported)")
    s, dist = cfg.schedule, cfg.run.distance
    reps = []
    for r in range(settings.repetitions):
        fold_embs, per_fold, labels = [], [], None
        for fold in run_folds:
            val_split = fold_split(fold, settings.folds, "val")
            plan = StagePlan(
                "single", fold_split(fold, settings.folds, "train"), val_split, s.epochs, s.warmup_epochs,
                s.scheduler, s.milestones,
            )  # fmt: skip
            keep = _KeepBest()
            trainer = FoldTrainer(
                cfg, hooks=(*hooks, keep) if settings.select_best else hooks, progress=progress,
                seed=seed + r * 1000 + fold,
            )  # fmt: skip
            trainer.setup(plan)
            trainer.fit()
            if settings.select_best and keep.state is not None:
                trainer.model.load_state_dict(keep.state)
            emb, labels = _embed_test(trainer, test_split)
            fold_embs.append(emb)
            m = evaluate(emb, labels, metrics=("mlrc",), distance=dist)
            per_fold.append({"fold": fold, "best_epoch": keep.epoch, **m})
        concat = F.normalize(torch.cat([F.normalize(e.float(), dim=1) for e in fold_embs], dim=1), dim=1)
        cm = evaluate(concat, labels, metrics=("mlrc",), distance=dist)
        row = {f"concat_{k}": cm[k] for k in MLRC_METRICS}
        row.update({f"sep_{k}": sum(f[k] for f in per_fold) / len(per_fold) for k in MLRC_METRICS})
        reps.append({"repetition": r, **row, "folds": per_fold})
    keys = [f"{p}_{k}" for p in ("concat", "sep") for k in MLRC_METRICS]
    n = len(reps)
    means = {k: sum(rep[k] for rep in reps) / n for k in keys}
    ci = {}
    for k in keys:
        if n < 2:
            ci[k] = 0.0
        else:
            sd = math.sqrt(sum((rep[k] - means[k]) ** 2 for rep in reps) / (n - 1))
            ci[k] = _t95(n) * sd / math.sqrt(n)
    return MLRCResult(
        metrics=means, ci95=ci, repetitions=reps, settings=settings, config_hash=config_hash(cfg), seed=seed,
        wall_time_s=time.perf_counter() - t0, folds_trained=run_folds,
    )  # fmt: skip
