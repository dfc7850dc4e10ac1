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

Every fold model is an ordinary run of the run store (:func:`fold_config`: single stage of ``schedule.epochs``
epochs with the config's scheduler, ``data.train_split``/``data.val_split`` the fold splits of
:mod:`dmllab.data.folds`, which the :class:`~dmllab.training.trainer.Trainer` resolves through a thin wrapper
(:class:`ClassSubset`) of the ``trainval`` dataset). So a fold trained once is never trained again, and a study
plans fold runs like any other (:func:`fold_runs`), sharing and de-duplicating them. With ``select_best``
(``run.keep_best``) the weights of the epoch with the best monitored validation value (``schedule.monitor`` on
the fold's validation classes) are kept, the MLRC practice of early stopping on validation; otherwise the last
epoch's. :func:`aggregate` turns finished fold runs into the protocol's numbers (:func:`run_mlrc` trains and
aggregates). The 50-trial hyper-parameter search of MLRC/PS is not part of this module (run it over configs).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from dmllab.data.folds import fold_split
from dmllab.spec import Spec
from dmllab.training.config import ExperimentConfig, config_hash

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
            data=replace(
                cfg.data,
                batch_size=settings.batch_size,
                sampler=Spec("class_balanced", {"per_class": settings.per_class}),
            ),
            optim=optim,
        )
    return replace(cfg, run=replace(cfg.run, two_stage=False, metrics=("mlrc",)))


def _t95(n: int) -> float:
    """Two-sided 95% Student-t quantile for n - 1 degrees of freedom (n >= 2)."""
    from scipy import stats

    return float(stats.t.ppf(0.975, n - 1))


def fold_config(cfg: ExperimentConfig, settings: MLRCSettings, fold: int) -> ExperimentConfig:
    """The run config of fold ``fold``'s model: :func:`mlrc_config`, trained on the fold's ``train`` classes,
    validated on its ``val`` classes every epoch, the best validation epoch kept when ``settings.select_best``
    (``run.keep_best``), tested on the test split. An ordinary run of the run store."""
    if not 0 <= fold < settings.folds:
        raise ValueError(f"fold must be in [0, {settings.folds}); got {fold}")
    cfg = mlrc_config(cfg, settings)
    return replace(
        cfg,
        data=replace(
            cfg.data,
            train_split=fold_split(fold, settings.folds, "train"),
            val_split=fold_split(fold, settings.folds, "val"),
        ),
        run=replace(cfg.run, keep_best=settings.select_best),
    )


def fold_runs(
    cfg: ExperimentConfig, settings: MLRCSettings, seed: int
) -> list[tuple[int, int, ExperimentConfig, int]]:
    """``(repetition, fold, fold config, run seed)`` of every fold model of the protocol: repetition ``r`` trains
    fold ``f`` with seed ``seed + r`` (the fold configs differ, so every pair is its own run of the store)."""
    if settings.repetitions < 1:
        raise ValueError(f"repetitions must be >= 1; got {settings.repetitions}")
    folds = tuple(range(settings.folds)) if settings.run_folds is None else tuple(settings.run_folds)
    if not folds or any(not 0 <= f < settings.folds for f in folds):
        raise ValueError(f"run_folds must be folds in [0, {settings.folds}); got {settings.run_folds}")
    if cfg.data.test_split is None:
        raise ValueError("the MLRC protocol needs a test split (query/gallery datasets are not supported)")
    return [
        (r, f, fold_config(cfg, settings, f), seed + r) for r in range(settings.repetitions) for f in folds
    ]


def fold_test_embeddings(
    cfg: ExperimentConfig, seed: int, *, device: str = "cpu", store: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Test-split embeddings and labels of a stored fold model (its ``final.pt``: the kept best epoch), checked
    against the record of its run in ``store`` (default :class:`~dmllab.training.store.RunStore`)."""
    from dmllab.training.export import embed_split, load_model
    from dmllab.training.store import RunStore

    store = store if store is not None else RunStore()
    path = store.checkpoint_dir(cfg, seed) / "final.pt"
    if not path.is_file():
        raise FileNotFoundError(
            f"the final model of fold run {path.parent} is missing (the checkpoint cache was cleared?); train the "
            "fold again: run_mlrc(..., force=True), `dmllab train ... --protocol mlrc --force`, or delete its folder "
            f"{store.run_dir(cfg, seed)} and re-run the study"
        )
    path = store.final_model(cfg, seed)  # checked against the run's record
    emb, labels, _ = embed_split(load_model(cfg, path), cfg, cfg.data.test_split, device=device)
    return emb, labels


def aggregate(
    settings: MLRCSettings,
    seed: int,
    results: Sequence[tuple[int, int, ExperimentConfig, int, Any]],
    *,
    embeddings: Any = fold_test_embeddings,
    wall_time_s: float = 0.0,
) -> MLRCResult:
    """The MLRC numbers of finished fold runs ``(repetition, fold, fold config, run seed, RunResult)``: per
    repetition the concatenated embedding's P@1/RP/MAP@R (each fold model's test embedding L2-normalised,
    concatenated, normalised again) and the separated ones (mean over the folds of each fold embedding's
    values); then the mean over repetitions with a 95% t-interval half-width. ``embeddings(fold config, seed)``
    gives a fold model's test embeddings and labels (:func:`fold_test_embeddings`: the stored final model, full
    precision; the run's own stored test metrics may differ in the last digits where the quick profile reads
    cached float16 features)."""
    from dmllab.metrics import evaluate

    reps = []
    for r in sorted({rep for rep, *_ in results}):
        mine = [x for x in results if x[0] == r]
        fold_embs, per_fold, labels = [], [], None
        dist = mine[0][2].run.distance
        for _, fold, fcfg, run_seed, res in mine:
            emb, labels = embeddings(fcfg, run_seed)
            fold_embs.append(emb)
            m = evaluate(emb, labels, metrics=("mlrc",), distance=dist)  # the concatenation's embeddings
            per_fold.append({"fold": fold, "best_epoch": res.best_epoch, **{k: m[k] for k in MLRC_METRICS}})
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
    folds = tuple(sorted({f for _, f, *_ in results}))
    return MLRCResult(
        metrics=means,
        ci95=ci,
        repetitions=reps,
        settings=settings,
        config_hash=config_hash(results[0][2]),
        seed=seed,
        wall_time_s=wall_time_s,
        folds_trained=folds,
    )


def run_mlrc(
    cfg: ExperimentConfig,
    settings: MLRCSettings = MLRCSettings(),
    *,
    seed: int | None = None,
    progress: bool = True,
    hooks: tuple = (),
    store: Any = None,
    force: bool = False,
) -> MLRCResult:
    """Run the MLRC protocol for ``cfg`` (any method/loss) and return its metrics (module docstring). Every
    fold model is a run of the run store (``store``, default :class:`~dmllab.training.store.RunStore`): a
    fold already stored is read, not retrained (``force`` retrains), and a study can plan the same runs
    (:func:`fold_runs`)."""
    from dmllab.training.store import run as store_run

    seed = cfg.run.seed if seed is None else seed
    t0 = time.perf_counter()
    planned = fold_runs(cfg, settings, seed)
    done = [
        (r, f, fcfg, s, store_run(fcfg, seed=s, store=store, hooks=hooks, progress=progress, force=force))
        for r, f, fcfg, s in planned
    ]
    embed = functools.partial(fold_test_embeddings, store=store)  # the store the folds were read from
    return aggregate(settings, seed, done, embeddings=embed, wall_time_s=time.perf_counter() - t0)
