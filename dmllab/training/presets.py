"""Presets: the papers' hyper-parameters as :class:`ExperimentConfig` objects.

``get(method, dataset, profile, **options)``:

* ``method``: see :func:`list_methods`. Variants are options: ``get("heated_softmax", "cub", variant="HLN")``;
  the spelling ``"heated_softmax:HLN"`` is accepted as a shorthand (``"method:variant"``; for
  ``proxy_synthesis`` the part after ":" is the base method, ``"proxy_synthesis:proxynca++"``).
* ``dataset``: a row of :data:`DATASETS` (dataset facts live there, nowhere else).
* ``profile``: ``paper`` (the authors' setup), ``quick`` (the offline benchmark sized for 2 CPU cores: a small
  CNN pre-trained on the synthetic pre-training pool, 56-pixel crops) or ``smoke`` (seconds, for tests).

Sources (cited next to each value): ProxyNCA++ = Teh et al. ECCV 2020 (Table 1, Sec. 4.1, appendix A) and
/work/shared/notes/official-code.md; Proxy Anchor = Kim et al. CVPR 2020 Sec. 5.1 + official-code.md;
Heated-up = Zhang et al. Sec. 5.1; Proxy Synthesis = Gu et al. AAAI 2021 supplement ("Conventional
Evaluation") + official-code.md. Choices the papers do not state are marked "dmllab choice".

The ``quick`` and ``smoke`` profiles keep each method's loss, optimiser family and protocol but replace the
scale (backbone, image size, embedding size, batch, epochs, learning rates of the backbone) by the profile's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from dmllab.training.config import (
    DataConfig,
    ExperimentConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    ScheduleConfig,
    pairs,
)

PROFILES = ("paper", "quick", "smoke")


@dataclass(frozen=True)
class DatasetSpec:
    """Facts about one dataset that presets need (ProxyNCA++ Table 1 and official-code.md)."""

    name: str
    lr: float  # ProxyNCA++ Table 1 base lr
    lr_proxies: float  # ProxyNCA++ Table 1 proxy lr ("+fast")
    batch_size: int  # ProxyNCA++ Table 1
    per_class: int  # ProxyNCA++ Table 1 "cbs"
    epochs: int  # official-code.md: 40 (CUB, Cars), 80 (SOP, In-Shop)
    two_stage: bool  # In-Shop: trainval only, constant lr (official-code.md)
    ks: tuple[int, ...]  # R@K reported in the papers
    nmi: bool  # NMI reported for CUB and Cars only
    val_split: str | None = "val"
    test_split: str | None = "test"
    query_split: str | None = None
    gallery_split: str | None = None
    large: bool = False  # SOP / In-Shop: the "large" column of Proxy Anchor / Proxy Synthesis settings
    freeze_bn: bool = True  # Proxy Anchor / Proxy Synthesis: BN frozen on CUB and Cars only
    ps_milestone: int = (
        20  # Proxy Synthesis supplement: lr x0.1 at epoch 20 (CUB, SOP), 50 (Cars), 60 (In-Shop)
    )
    synthetic: bool = False  # the offline benchmark (no root needed)


DATASETS: dict[str, DatasetSpec] = {
    "cub": DatasetSpec("cub", 4e-3, 4e2, 32, 4, 40, True, (1, 2, 4, 8), True, ps_milestone=20),
    "cars": DatasetSpec("cars", 4e-3, 4e2, 32, 4, 40, True, (1, 2, 4, 8), True, ps_milestone=50),
    "sop": DatasetSpec(
        "sop", 2.4e-2, 2.4e2, 192, 3, 80, True, (1, 10, 100, 1000), False, large=True, freeze_bn=False,
        ps_milestone=20,
    ),
    "inshop": DatasetSpec(
        "inshop", 2.4e-2, 2.4e3, 192, 3, 80, False, (1, 10, 20, 30, 40), False, val_split=None,
        test_split=None, query_split="query", gallery_split="gallery", large=True, freeze_bn=False,
        ps_milestone=60,
    ),
    # The offline benchmark behaves like CUB (class-disjoint halves), so it takes CUB's facts.
    "synthetic": DatasetSpec("synthetic", 4e-3, 4e2, 32, 4, 40, True, (1, 2, 4, 8), True, synthetic=True),
    "digits": DatasetSpec("digits", 4e-3, 4e2, 32, 4, 40, True, (1, 2, 4, 8), True, synthetic=True),
}  # fmt: skip


# ------------------------------------------------------------------------------------------------ profiles
def _paper_base(spec: DatasetSpec) -> ExperimentConfig:
    """ProxyNCA++ setup (Table 1, Sec. 4.1, official-code.md): ResNet-50 (ImageNet), 2048-d, Adam eps 1,
    Table 1 lrs, warm-up 5 epochs, grad clip 10, plateau(4, 0.1) two-stage, 256 crops."""
    return ExperimentConfig(
        dataset=spec.name,
        profile="paper",
        data=DataConfig(
            dataset=spec.name,
            val_split=spec.val_split,
            train_split="train" if spec.two_stage else "trainval",
            test_split=spec.test_split,
            query_split=spec.query_split,
            gallery_split=spec.gallery_split,
            batch_size=spec.batch_size,
            per_class=spec.per_class,
            transform="proxynca++",
            num_workers=8,
        ),
        model=ModelConfig(backbone="resnet50", pretrained=True, embedding_dim=2048),
        loss=LossConfig(name="proxynca", kwargs=pairs(temperature=1 / 9, prob=True)),
        optim=OptimConfig(name="adam", lr=spec.lr, lr_proxies=spec.lr_proxies, eps=1.0, grad_clip_value=10.0),
        schedule=ScheduleConfig(
            epochs=spec.epochs,
            warmup_epochs=5,
            scheduler="plateau" if spec.two_stage else "none",
            patience=4,
            factor=0.1,
        ),
        run=RunConfig(
            two_stage=spec.two_stage,
            metrics=("recall", "nmi") if spec.nmi else ("recall",),
            ks=spec.ks,
        ),
    )


def _synthetic_kwargs(spec: DatasetSpec, **kw: Any) -> tuple:
    return pairs(kw) if spec.name == "synthetic" else ()


def _quick_base(spec: DatasetSpec) -> ExperimentConfig:
    """The offline benchmark on 2 CPU cores: SmallCNN (width 16) pre-trained on the synthetic pre-training
    pool, 64x64 images with 56-pixel crops, 128-d, batch 32 = 8 x 4, the dataset's protocol (two-stage: 1 + 8
    epochs on ``train`` with the plateau rule at patience 2, then ``trainval`` up to the best epoch), CPU
    (dmllab choice; sized so a ProxyNCA++ run takes <= 3 min on 2 cores).

    Backbone lr 0.1, embedding lr = the dataset's base lr (dmllab choice): with the papers' Adam eps = 1 the
    update is about ``lr * gradient`` (SGD-like), and at the base lr 4e-3 the SmallCNN trunk barely moved -
    stage-1 validation R@1 stayed at the pre-trained level while only the head and proxies learned."""
    base = _paper_base(spec)
    return replace(
        base,
        profile="quick",
        data=replace(
            base.data,
            train_split="train" if spec.val_split else "trainval",
            transform="quick",
            num_workers=0,
            eval_batch_size=256,
            dataset_kwargs=_synthetic_kwargs(spec, image_size=64),
        ),
        model=replace(base.model, backbone="smallcnn", embedding_dim=128, backbone_kwargs=pairs(width=16)),
        optim=replace(base.optim, lr=0.1, lr_embedding=base.optim.lr),
        schedule=replace(base.schedule, epochs=8, warmup_epochs=1, patience=2),
        run=replace(base.run, two_stage=spec.two_stage, device="cpu", metrics=("recall", "nmi")),
    )


def _smoke_base(spec: DatasetSpec) -> ExperimentConfig:
    """Seconds, for tests: 24 synthetic classes x 10 images at 32x32 (train 6 classes, val 6, test 12),
    SmallCNN width 8 from scratch, 16-d, batch 16 = 4 x 4, 2 epochs, no warm-up, CPU."""
    base = _paper_base(spec)
    return replace(
        base,
        profile="smoke",
        data=replace(
            base.data,
            train_split="train" if spec.val_split else "trainval",
            batch_size=16,
            per_class=4,
            transform="smoke",
            num_workers=0,
            eval_batch_size=64,
            dataset_kwargs=_synthetic_kwargs(
                spec, image_size=32, num_classes=24, images_per_class=10, num_pretrain_classes=8
            ),
        ),
        model=replace(
            base.model,
            backbone="smallcnn",
            pretrained=False,
            embedding_dim=16,
            backbone_kwargs=pairs(width=8),
        ),
        schedule=replace(base.schedule, epochs=2, warmup_epochs=0, patience=1),
        run=replace(base.run, device="cpu", metrics=("recall",), ks=(1, 2, 4)),
    )


_PROFILE_BASES: dict[str, Callable[[DatasetSpec], ExperimentConfig]] = {
    "paper": _paper_base,
    "quick": _quick_base,
    "smoke": _smoke_base,
}


# ------------------------------------------------------------------------------------------------- methods
def _with_loss(cfg: ExperimentConfig, name: str, **kwargs: Any) -> ExperimentConfig:
    return replace(cfg, loss=LossConfig(name=name, kwargs=pairs(kwargs)))


def _authors_code_protocol(cfg: ExperimentConfig) -> ExperimentConfig:
    """ProxyNCA++ code base, ``paper`` profile: where the authors' released train.py and the paper disagree,
    follow the code (official-code.md): plateau rule and best epoch on the NMI/R@1 harmonic mean
    (``schedule.monitor``), a fresh Adam after the warm-up (``optim.fresh_after_warmup``), stage-2 drops one
    epoch later (``schedule.stage2_drop_lag=1``). quick/smoke keep the paper's choices (R@1, no reset, lag 0);
    the paper's versions of ``paper`` runs: ``schedule.monitor=R@1 optim.fresh_after_warmup=false
    schedule.stage2_drop_lag=0``."""
    if cfg.profile != "paper":
        return cfg
    return replace(
        cfg,
        optim=replace(cfg.optim, fresh_after_warmup=True),
        schedule=replace(cfg.schedule, monitor="hmean_nmi_r1", stage2_drop_lag=1),
    )


def _proxynca_family(
    cfg: ExperimentConfig,
    spec: DatasetSpec,
    *,
    prob: bool,
    scale: bool,
    cbs: bool,
    norm: bool,
    max: bool,  # noqa: A002 - the paper's name for the enhancement
    fast: bool,
    pooling: str | None = None,
    k: int | None = None,
    temperature: float | None = None,
) -> ExperimentConfig:
    """ProxyNCA (Eq. 3) plus the ProxyNCA++ enhancements (Sec. 3): +prob (positive proxy in the denominator,
    Eq. 6), +scale (T = 1/9), +cbs (class-balanced batches), +norm (LayerNorm before the embedding layer),
    +max (global max pooling; or ``pooling="kmax", k=...``, Eq. 7), +fast (proxy lr from Table 1)."""
    t = temperature if temperature is not None else (1 / 9 if scale else 1.0)
    cfg = _with_loss(cfg, "proxynca", temperature=t, prob=prob)
    pool = pooling or ("max" if max else "avg")
    lr_proxies = cfg.optim.lr_proxies if fast else None
    cfg = replace(
        cfg,
        data=replace(cfg.data, per_class=cfg.data.per_class if cbs else None),
        model=replace(cfg.model, pooling=pool, k=k, norm="layernorm" if norm else "none"),
        optim=replace(cfg.optim, lr_proxies=lr_proxies),
    )
    return _authors_code_protocol(cfg)


def _proxynca(cfg: ExperimentConfig, spec: DatasetSpec, **opts: Any) -> ExperimentConfig:
    """Classic ProxyNCA in the ProxyNCA++ code base: every enhancement off unless toggled on."""
    flags = dict(prob=False, scale=False, cbs=False, norm=False, max=False, fast=False)
    return _proxynca_family(cfg, spec, **{**flags, **opts})


def _proxynca_pp(cfg: ExperimentConfig, spec: DatasetSpec, **opts: Any) -> ExperimentConfig:
    """ProxyNCA++: every enhancement on unless toggled off (ablations: ``get(..., fast=False)``)."""
    flags = dict(prob=True, scale=True, cbs=True, norm=True, max=True, fast=True)
    return _proxynca_family(cfg, spec, **{**flags, **opts})


def _normsoftmax(
    cfg: ExperimentConfig,
    spec: DatasetSpec,
    *,
    max: bool = False,
    fast: bool = False,
    temperature: float = 0.5,
) -> ExperimentConfig:  # noqa: A002
    """NormSoftMax in the ProxyNCA++ code base (appendix A, Table 12): T = 1/2, no norm, no cbs, avg pooling;
    +fast = proxy lr 4e-1 on CUB/Cars (100 x the base lr; the same ratio on SOP/In-Shop, dmllab choice)."""
    cfg = _with_loss(cfg, "normsoftmax", temperature=temperature)
    cfg = replace(
        cfg,
        data=replace(cfg.data, per_class=None),
        model=replace(cfg.model, pooling="max" if max else "avg", norm="none"),
        optim=replace(cfg.optim, lr_proxies=100 * (cfg.optim.lr_embedding or cfg.optim.lr) if fast else None),
    )
    return _authors_code_protocol(cfg)


def _pa_like(cfg: ExperimentConfig, spec: DatasetSpec, *, paper: bool) -> ExperimentConfig:
    """Proxy Anchor training setup (PA Sec. 5.1 + official-code.md): AdamW wd 1e-4, lr 1e-4 (CUB/Cars) /
    6e-4 (SOP/In-Shop), proxy lr x100, grad clip 10 (paper: proxies too), 512-d, GAP+GMP head with kaiming init and L2 norm,
    BN frozen on CUB/Cars, warm-up 5 epochs (ResNet-50), StepLR gamma 0.5 (0.25 on SOP/In-Shop, step 10:
    dmllab choice, not stated), random batches of 180 (PS supplement: "batch size of 180"), 224 crops,
    40/60 epochs, cosine distance at evaluation. Model selection on validation, not on test (official-code.md).
    """
    lr = (6e-4 if spec.large else 1e-4) if paper else 1e-3  # quick/smoke: small CNN, dmllab choice
    cfg = replace(
        cfg,
        optim=OptimConfig(
            name="adamw",
            lr=lr,
            lr_proxies=100 * lr,
            eps=1e-8,
            weight_decay=1e-4,
            grad_clip_value=10.0,
        ),
        model=replace(cfg.model, pooling="avg+max", norm="none", l2_normalize=True, head_init="kaiming"),
        run=replace(cfg.run, distance="cosine"),
    )
    if paper:
        cfg = replace(
            cfg,
            data=replace(cfg.data, batch_size=180, per_class=None, transform="proxy_anchor"),
            model=replace(cfg.model, embedding_dim=512, freeze_bn=spec.freeze_bn),
            # The released PA training loop clips the loss parameters (proxies) by value 10 as well as the
            # model's, unlike ProxyNCA++ (official-code.md).
            optim=replace(cfg.optim, clip_proxies=True),
            schedule=replace(
                cfg.schedule,
                epochs=60 if spec.large else 40,
                warmup_epochs=5,
                scheduler="step",
                step_size=10,
                gamma=0.25 if spec.large else 0.5,
            ),
        )
    return cfg


def _proxy_anchor(
    cfg: ExperimentConfig, spec: DatasetSpec, *, alpha: float = 32.0, delta: float = 0.1
) -> ExperimentConfig:
    """Proxy Anchor loss (PA Eq. 4), alpha 32, delta 0.1, in the PA training setup."""
    cfg = _pa_like(cfg, spec, paper=cfg.profile == "paper")
    return _with_loss(cfg, "proxy_anchor", alpha=alpha, delta=delta)


HEATED_VARIANTS = ("SM", "LN", "BN", "HLN", "HBN")


def _heated_softmax(cfg: ExperimentConfig, spec: DatasetSpec, *, variant: str = "HLN", alpha: float = 16.0):
    """Heated-up Softmax (Zhang et al. Sec. 5.1): GoogLeNet (ImageNet), 64-d, batch 32, SGD momentum 0.9 lr 4e-3
    (Adam lr 1e-2 on SOP), alpha 16; heating-up (HLN/HBN) multiplies alpha by 1/4 and the lr by 0.1 at epoch 40
    of 50 (the paper: "converges within 50 epochs"; the heating epoch is not stated: dmllab choice).
    Variants: SM = plain softmax (unnormalised, alpha 1); LN = L2-normalised embedding; BN = BatchNorm
    without scale / sqrt(dim) on the embedding; H* = with heating-up. Random batches, 224 crops. Evaluation by
    cosine distance (Sec. 5.3: every feature is L2-normalised at test time)."""
    if variant not in HEATED_VARIANTS:
        raise ValueError(f"unknown heated_softmax variant {variant!r}; valid: {', '.join(HEATED_VARIANTS)}")
    paper = cfg.profile == "paper"
    if variant == "SM":
        cfg = _with_loss(cfg, "softmax")
    else:
        cfg = _with_loss(cfg, "heated_softmax", alpha=alpha)
    norm = "batchnorm" if variant.endswith("BN") else "none"
    model = replace(
        cfg.model, pooling="avg", norm=norm, norm_position=None, l2_normalize=variant.endswith("LN")
    )
    optim = (
        OptimConfig(name="adam", lr=1e-2, eps=1e-8, grad_clip_value=None)
        if spec.name == "sop"
        else OptimConfig(name="sgd", lr=4e-3, momentum=0.9, grad_clip_value=None)
    )
    # Zhang et al. Sec. 5.3: "in test phase, all the features are l2 normalized before calculating the
    # metric" (every variant, SM included): cosine distance at evaluation.
    run = replace(cfg.run, distance="cosine")
    epochs = 50 if paper else cfg.schedule.epochs
    heat = (40 if paper else max(1, (3 * epochs) // 4 + 1)) if variant.startswith("H") else None
    schedule = replace(cfg.schedule, epochs=epochs, warmup_epochs=0, scheduler="none", heat_epoch=heat)
    if paper:
        model = replace(model, backbone="googlenet", embedding_dim=64)
        data = replace(cfg.data, batch_size=32, per_class=None, transform="proxy_anchor")
    else:
        optim = replace(optim, lr=optim.lr * 10)  # small from-pretrained CNN: dmllab choice
        data = replace(cfg.data, per_class=None)
    return replace(cfg, model=model, optim=optim, schedule=schedule, data=data, run=run)


PS_BASES = (
    "normsoftmax",
    "proxynca",
    "proxynca++",
    "proxy_anchor",
    "softmax",
    "sphereface",
    "cosface",
    "arcface",
)


def _proxy_synthesis(
    cfg: ExperimentConfig,
    spec: DatasetSpec,
    *,
    base: str = "normsoftmax",
    ps_alpha: float = 0.4,
    ps_mu: float = 1.0,
) -> ExperimentConfig:
    """Proxy Synthesis (PS Eq. 2-5) over a proxy loss, released setup (PS supplement + official-code.md):
    512-d, GAP, batch 128 (random), Adam eps 1e-2, lr 1e-4 (CUB/Cars) / 1e-3 (SOP/In-Shop), proxy lr x100,
    wd 1e-4, lr x0.1 at epoch 20 (CUB, SOP) / 50 (Cars) / 60 (In-Shop), BN frozen on CUB/Cars, 224 crops.
    Norm-softmax scale 23 (T = 1/23), ProxyNCA scale 12 (T = 1/12), margin softmax per the PS supplement.
    ResNet-50 replaces BN-Inception (not in torchvision): documented deviation. Epochs = milestone + 20
    (not stated: dmllab choice). Evaluation by cosine distance. ``proxy_anchor`` as base keeps the PA setup."""
    if base not in PS_BASES:
        raise ValueError(f"unknown proxy_synthesis base {base!r}; valid: {', '.join(PS_BASES)}")
    paper = cfg.profile == "paper"
    if base == "proxy_anchor":
        cfg = _proxy_anchor(cfg, spec)
    elif base in ("proxynca", "proxynca++"):
        cfg = _with_loss(cfg, "proxynca", temperature=1 / 12, prob=base == "proxynca++")
    elif base == "normsoftmax":
        cfg = _with_loss(cfg, "normsoftmax", temperature=1 / 23)
    else:
        cfg = _with_loss(cfg, base)
    if base != "proxy_anchor":
        lr = 1e-3 if spec.large else 1e-4
        if not paper:
            lr = 1e-3
        cfg = replace(
            cfg,
            optim=OptimConfig(
                name="adam", lr=lr, lr_proxies=100 * lr, eps=1e-2, weight_decay=1e-4, grad_clip_value=None
            ),
            model=replace(cfg.model, pooling="avg", norm="none", l2_normalize=False),
            data=replace(cfg.data, per_class=None),
            # PS scores with cosine similarity s(a, b) (PS Eq. 1, 6); evaluated by cosine, as Proxy Anchor.
            run=replace(cfg.run, distance="cosine"),
        )
        if paper:
            cfg = replace(
                cfg,
                data=replace(cfg.data, batch_size=128, transform="proxy_anchor"),
                model=replace(cfg.model, embedding_dim=512, freeze_bn=spec.freeze_bn),
                schedule=replace(
                    cfg.schedule,
                    epochs=spec.ps_milestone + 20,
                    warmup_epochs=0,
                    scheduler="multistep",
                    milestones=(spec.ps_milestone,),
                    factor=0.1,
                ),
            )
    return replace(cfg, loss=replace(cfg.loss, synthesis=True, ps_alpha=ps_alpha, ps_mu=ps_mu))


def _pair_loss(name: str, **loss_defaults: Any) -> Callable[..., ExperimentConfig]:
    def build(cfg: ExperimentConfig, spec: DatasetSpec, **loss_kwargs: Any) -> ExperimentConfig:
        """Pair-based baseline (pytorch-metric-learning): dmllab choice of training setup, the papers compare
        against published numbers: 512-d, GAP, AdamW lr 1e-4 wd 1e-4 (paper profile), class-balanced batches
        (pairs need positives), learnable loss parameters at 10 x the lr."""
        cfg = _with_loss(cfg, name, **{**loss_defaults, **loss_kwargs})
        lr = 1e-4 if cfg.profile == "paper" else 1e-3
        cfg = replace(
            cfg,
            optim=OptimConfig(name="adamw", lr=lr, lr_proxies=10 * lr, eps=1e-8, weight_decay=1e-4),
            model=replace(cfg.model, pooling="avg", norm="none", l2_normalize=False),
        )
        if cfg.profile == "paper":
            cfg = replace(cfg, model=replace(cfg.model, embedding_dim=512))
        return cfg

    build.__doc__ = f"{name}: " + (build.__doc__ or "")
    return build


# method name -> (builder, valid options)
_METHODS: dict[str, Callable[..., ExperimentConfig]] = {
    "proxynca": _proxynca,
    "proxynca++": _proxynca_pp,
    "normsoftmax": _normsoftmax,
    "proxy_anchor": _proxy_anchor,
    "heated_softmax": _heated_softmax,
    "proxy_synthesis": _proxy_synthesis,
    "margin": _pair_loss("margin"),
    "triplet_semihard": _pair_loss("triplet_semihard"),
    "multi_similarity": _pair_loss("multi_similarity"),
}
_SHORTHAND_OPTION = {"heated_softmax": "variant", "proxy_synthesis": "base"}


def list_methods() -> list[str]:
    """Method names accepted by :func:`get` (variants are options, see the module docstring)."""
    return sorted(_METHODS)


def list_datasets() -> list[str]:
    """Dataset names with a :class:`DatasetSpec`."""
    return sorted(DATASETS)


def list_profiles() -> list[str]:
    """``paper``, ``quick``, ``smoke``."""
    return list(PROFILES)


def method_options(method: str) -> list[str]:
    """Keyword options accepted by ``get(method, ...)``."""
    import inspect

    name = method.split(":", 1)[0]
    builder = _lookup(_METHODS, name, "method")
    if name in ("proxynca", "proxynca++"):
        params = inspect.signature(_proxynca_family).parameters.values()
        return sorted(p.name for p in params if p.kind is p.KEYWORD_ONLY)
    params = inspect.signature(builder).parameters.values()
    return sorted(p.name for p in params if p.kind is p.KEYWORD_ONLY)


def _lookup(table: dict, name: str, what: str) -> Any:
    if name not in table:
        raise KeyError(f"unknown {what} {name!r}; valid {what}s: {', '.join(sorted(table))}")
    return table[name]


def get(method: str, dataset: str, profile: str = "paper", **options: Any) -> ExperimentConfig:
    """The preset config of ``method`` on ``dataset`` at ``profile`` (module docstring).

    Options are method toggles (``fast=False``, ``variant="HLN"``, ``base="normsoftmax"``, ``pooling="kmax",
    k=4``); unknown ones raise ValueError listing the valid options. Nothing is read from disk.
    """
    name, _, short = method.partition(":")
    builder = _lookup(_METHODS, name, "method")
    spec = _lookup(DATASETS, dataset, "dataset")
    base_fn = _lookup(_PROFILE_BASES, profile, "profile")
    if short:
        if name not in _SHORTHAND_OPTION:
            raise ValueError(
                f"method {name!r} takes no ':variant' suffix (only {', '.join(_SHORTHAND_OPTION)})"
            )
        options = {_SHORTHAND_OPTION[name]: short, **options}
    valid = method_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for method {name!r}; valid options: {', '.join(valid) or 'none'}"
        )
    cfg = builder(base_fn(spec), spec, **options)
    label = name
    if name in _SHORTHAND_OPTION and _SHORTHAND_OPTION[name] in options:
        label = f"{name}:{options[_SHORTHAND_OPTION[name]]}"
    elif name == "heated_softmax":
        label = "heated_softmax:HLN"
    elif name == "proxy_synthesis":
        label = "proxy_synthesis:normsoftmax"
    return dataclasses.replace(cfg, method=label)


def describe(cfg: ExperimentConfig) -> str:
    """One line with the key hyper-parameters of a config (for ``dmllab presets``)."""
    m, o, d, s = cfg.model, cfg.optim, cfg.data, cfg.schedule
    loss_kw = ",".join(f"{k}={_fmt(v)}" for k, v in cfg.loss.kwargs)
    loss = f"{cfg.loss.name}({loss_kw})" + (
        f"+PS(a={cfg.loss.ps_alpha:g},mu={cfg.loss.ps_mu:g})" if cfg.loss.synthesis else ""
    )
    batch = (
        f"{d.batch_size}={d.batch_size // d.per_class}x{d.per_class}"
        if d.per_class
        else f"{d.batch_size} random"
    )
    head = (
        f"{m.pooling}{'' if m.k is None else m.k}"
        + (f"+{m.norm}" if m.norm != "none" else "")
        + ("+l2" if m.l2_normalize else "")
    )
    lrs = f"lr {_fmt(o.lr)}" + (f"/proxy {_fmt(o.lr_proxies)}" if o.lr_proxies is not None else "")
    sched = s.scheduler + (f"@{s.heat_epoch}heat" if s.heat_epoch else "")
    proto = "two-stage" if cfg.run.two_stage else "single-stage"
    return (
        f"{cfg.method:<28} {cfg.dataset:<9} {cfg.profile:<6} {m.backbone}{'(pt)' if m.pretrained else ''} "
        f"emb {m.embedding_dim} {head} | {loss} | {o.name}{_optim_extra(o)} {lrs} | batch {batch} | "
        f"{s.epochs}+{s.warmup_epochs}w ep {sched} {proto}"
    )


def _optim_extra(o: Any) -> str:
    if o.name in ("adam", "adamw", "rmsprop"):
        return f"(eps {_fmt(o.eps)}" + (f", wd {_fmt(o.weight_decay)})" if o.weight_decay else ")")
    return f"(momentum {_fmt(o.momentum)})"


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
