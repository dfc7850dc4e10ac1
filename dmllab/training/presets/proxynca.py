"""ProxyNCA, ProxyNCA++ and NormSoftmax as set up in the ProxyNCA++ code base (Teh et al., ECCV 2020).

Paper profile: ProxyNCA++ Table 1 / Sec. 4.1 (the paper base) plus, where the authors' released code
(euwern/proxynca_pp at 217233d; official-code.md) and the paper disagree, the code:

* the plateau rule and the stage-1 best epoch watch ``2 * R@1 / (1 + R@1)`` (``schedule.monitor="hmean_r1"``):
  train.py steps ``ReduceLROnPlateau(mode="max", patience=4)`` on ``chmean = 2 * nmi * R@1 / (nmi + R@1)``
  (train.py:484-486), but in the train mode that selects epochs ``--eval_nmi`` stays off (only the
  trainval/test modes set it, train.py:73-77) and ``utils.evaluate`` then returns ``nmi = 1`` (utils.py:111-120).
  The value ranks epochs as R@1 does, yet the plateau's relative threshold sees it improve by a factor
  ``1 + R@1`` less (:func:`dmllab.training.schedules.hmean_r1`). Options: ``schedule.monitor=R@1`` (the paper
  text), ``schedule.monitor=hmean_nmi_r1`` (the harmonic mean with the real validation NMI: the code run with
  ``--eval_nmi``);
* a fresh Adam after the warm-up (``optim.fresh_after_warmup``: train.py builds ``opt_warmup`` and ``opt``);
* stage-2 drops one epoch later (``schedule.stage2_drop_lag=1``: train.py ``scheduler.step(e)`` at the end of
  epoch ``e``);
* fp16 autocast with loss scaling (``run.amp="fp16"``, set in the paper base): every README command passes
  ``--apex``, i.e. ``amp.initialize(..., opt_level='O1')`` with dynamic loss scaling (train.py:314-315, 411-413).
  dmllab keeps the loss in float32 (apex O1 would run its matmul in fp16). ``run.amp=off`` or ``bf16`` are options.

The paper's versions of a ``paper`` run: ``schedule.monitor=R@1 optim.fresh_after_warmup=false
schedule.stage2_drop_lag=0``; the quick and smoke overlays keep the paper text's choices.

Quick overlay: backbone lr 1.0, embedding lr = the dataset's base lr (dmllab choice): with the papers' Adam
eps = 1 the update is about ``lr * gradient`` (SGD-like), and at the base lr 4e-3 the SmallCNN trunk barely
moved (stage-1 validation R@1 stayed at the pre-trained level while only the head and proxies learned). 1.0 for
the two trainable SmallCNN blocks was chosen on the validation split among 0.1, 0.3, 1.0 and 2.0
(benchmarks/select_quick.py -> results/benchmarks/quick_selection.csv).

"-fast" and "+fast" (Sec. 3.6): without +fast the proxies train at the embedding layer's lr
(:mod:`dmllab.training.optim`), so on paper and smoke the proxies, the embedding layer and the trunk share one lr,
as the paper's "-fast" says; "+fast" trains the proxies at a multiple of the embedding lr (Table 1: 4e2 / 4e-3
= 1e5 x; NormSoftmax, Table 12: 100 x). On quick the trunk lr differs from the embedding lr: this is the analogue's
one departure from "all share one lr" (the small CNN's trunk under Adam eps 1 needs its own lr).
"""

from __future__ import annotations

from dataclasses import replace

from dmllab.spec import Spec
from dmllab.training.config import ExperimentConfig
from dmllab.training.presets.datasets import DatasetSpec
from dmllab.training.presets.methods import method, with_loss
from dmllab.training.presets.profiles import class_balanced

# quick and smoke keep the paper text's protocol choices (R@1 monitor, one optimiser, no stage-2 lag).
_PAPER_TEXT = {"optim.fresh_after_warmup": False, "schedule.monitor": "R@1", "schedule.stage2_drop_lag": 0}
OVERLAYS = {
    "quick": {
        # the base lr moves to the embedding head, the small CNN trunk gets 1.0 (module docstring)
        "optim.lr_embedding": lambda cfg: cfg.optim.lr_embedding or cfg.optim.lr,
        "optim.lr": 1.0,
        **_PAPER_TEXT,
    },
    "smoke": _PAPER_TEXT,
}


def _authors_code(cfg: ExperimentConfig) -> ExperimentConfig:
    return replace(
        cfg,
        optim=replace(cfg.optim, fresh_after_warmup=True),
        schedule=replace(cfg.schedule, monitor="hmean_r1", stage2_drop_lag=1),
    )


def _proxynca_family(
    cfg: ExperimentConfig,
    *,
    prob: bool,
    scale: bool,
    cbs: bool,
    norm: bool,
    max: bool,  # noqa: A002 - the paper's name for the enhancement
    fast: bool,
    pooling: str | None,
    k: int | None,
    temperature: float | None,
) -> ExperimentConfig:
    """ProxyNCA (Eq. 3) plus the ProxyNCA++ enhancements (Sec. 3): +prob (positive proxy in the denominator,
    Eq. 6), +scale (T = 1/9), +cbs (class-balanced batches), +norm (LayerNorm before the embedding layer),
    +max (global max pooling; or ``pooling="kmax", k=...``, Eq. 7), +fast (proxy lr from Table 1)."""
    t = temperature if temperature is not None else (1 / 9 if scale else 1.0)
    cfg = with_loss(cfg, "proxynca", temperature=t, prob=prob)
    cfg = replace(
        cfg,
        data=replace(cfg.data, sampler=cfg.data.sampler if cbs else class_balanced(None)),
        model=replace(
            cfg.model,
            pooling=Spec(pooling or ("max" if max else "avg"), {} if k is None else {"k": k}),
            norm="layernorm" if norm else "none",
        ),
        optim=replace(cfg.optim, lr_proxies=cfg.optim.lr_proxies if fast else None),
    )
    return _authors_code(cfg)


@method(
    "proxynca",
    OVERLAYS,
    tuned=(
        None,
        "classic ProxyNCA (Movshovitz-Attias et al. 2017; ProxyNCA++ Eq. 3, its Table 7 baseline) has no "
        "temperature: T = 1; a temperature is ProxyNCA++'s +scale",
    ),
)
def proxynca(
    cfg: ExperimentConfig,
    spec: DatasetSpec,
    *,
    prob: bool = False,
    scale: bool = False,
    cbs: bool = False,
    norm: bool = False,
    max: bool = False,  # noqa: A002
    fast: bool = False,
    pooling: str | None = None,
    k: int | None = None,
    temperature: float | None = None,
) -> ExperimentConfig:
    """Classic ProxyNCA in the ProxyNCA++ code base: every enhancement off unless toggled on."""
    toggles = dict(prob=prob, scale=scale, cbs=cbs, norm=norm, max=max, fast=fast)
    return _proxynca_family(cfg, **toggles, pooling=pooling, k=k, temperature=temperature)


@method(
    "proxynca++",
    OVERLAYS,
    tuned=("temperature", "ProxyNCA++ Sec. 3.3 (+scale) and Fig. 4a sweep the temperature T (1/9)"),
)
def proxynca_pp(
    cfg: ExperimentConfig,
    spec: DatasetSpec,
    *,
    prob: bool = True,
    scale: bool = True,
    cbs: bool = True,
    norm: bool = True,
    max: bool = True,  # noqa: A002
    fast: bool = True,
    pooling: str | None = None,
    k: int | None = None,
    temperature: float | None = None,
) -> ExperimentConfig:
    """ProxyNCA++: every enhancement on unless toggled off (ablations: ``get(..., fast=False)``)."""
    toggles = dict(prob=prob, scale=scale, cbs=cbs, norm=norm, max=max, fast=fast)
    return _proxynca_family(cfg, **toggles, pooling=pooling, k=k, temperature=temperature)


@method(
    "normsoftmax",
    OVERLAYS,
    tuned=(
        "temperature",
        "NormSoftmax's temperature (Zhai & Wu 2019); ProxyNCA++ Fig. 5 sweeps it (Table 12: 1/2)",
    ),
)
def normsoftmax(
    cfg: ExperimentConfig,
    spec: DatasetSpec,
    *,
    max: bool = False,  # noqa: A002
    fast: bool = False,
    temperature: float = 0.5,
) -> ExperimentConfig:
    """NormSoftMax in the ProxyNCA++ code base (appendix A, Table 12): T = 1/2, no norm, no cbs, avg pooling;
    +fast = proxy lr 4e-1 on CUB/Cars (100 x the base lr; the same ratio on SOP/In-Shop, dmllab choice)."""
    cfg = with_loss(cfg, "normsoftmax", temperature=temperature)
    cfg = replace(
        cfg,
        data=replace(cfg.data, sampler=class_balanced(None)),
        model=replace(cfg.model, pooling=Spec("max" if max else "avg"), norm="none"),
        optim=replace(cfg.optim, lr_proxies=100 * cfg.optim.lr if fast else None),
    )
    return _authors_code(cfg)
