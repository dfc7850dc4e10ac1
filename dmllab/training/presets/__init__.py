"""Presets: the papers' hyper-parameters as :class:`ExperimentConfig` objects.

``get(method, dataset, profile, **options)``:

* ``method``: see :func:`list_methods`. Variants are options: ``get("heated_softmax", "cub", variant="HLN")``;
  the spelling ``"heated_softmax:HLN"`` is accepted as a shorthand (``"method:variant"``; for
  ``proxy_synthesis`` the part after ":" is the base method, ``"proxy_synthesis:proxynca++"``).
* ``dataset``: a row of :data:`DATASETS` (dataset facts live there, nowhere else).
* ``profile``: ``paper`` (the authors' setup), ``quick`` (the offline benchmark sized for 2 CPU cores: a small
  CNN pre-trained on the synthetic pre-training pool, 56-pixel crops) or ``smoke`` (seconds, for tests).

Layout: ``datasets.py`` (the :class:`DatasetSpec` table), ``profiles.py`` (the paper base; quick and smoke
as overlays on a method's paper config), ``methods.py`` (:class:`Method`, shared helpers), and one module per
method family: ``proxynca.py`` (ProxyNCA, ProxyNCA++, NormSoftmax of the ProxyNCA++ code base),
``proxy_anchor.py``, ``heated.py``, ``proxy_synthesis.py``, ``pair.py``. A family module registers its methods
where it defines them (``@method(...)``, :data:`METHODS`); this package imports every module it holds, so a new
family is one new module.

Protocols: the ProxyNCA++ code base and the pair baselines use ProxyNCA++'s two-stage protocol; Proxy Anchor,
Heated-up and Proxy Synthesis train a fixed schedule, as their papers do (``two_stage=True`` is an option).
Heated-up's HLN/HBN are fine-tunes of the LN/BN run (``ExperimentConfig.finetune``: their own runs, keyed on the
parent, which the run store trains first); ``heating="in_run"`` is the release's single run.
Precision (``run.amp``) is each release's on the paper profile: fp16 autocast with loss scaling for the ProxyNCA++
code base (apex O1), fp32 for Proxy Anchor, Proxy Synthesis and Heated-up; the default (none on the CPU) on quick
and smoke.
Every preset's schedule is checked (:func:`dmllab.training.schedules.check_schedule`): an lr drop after the
last epoch, or a heated run that would end (or stop) before heating, is an error here, not a silent
difference. Sources are cited in each module; values the papers do not state are marked "dmllab choice".
"""

# ruff: noqa: F401 - the imports are the package's public names

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any

from dmllab.profiles import PROFILES
from dmllab.training import schedules
from dmllab.training.callbacks import check_callbacks
from dmllab.training.config import ExperimentConfig
from dmllab.training.presets import tuned as tuned_recipes
from dmllab.training.presets.datasets import DATASETS, DatasetSpec
from dmllab.training.presets.heated import HEATED_VARIANTS
from dmllab.training.presets.methods import METHODS, Method, apply_overlay
from dmllab.training.presets.profiles import PROFILE_OVERLAYS, paper_base
from dmllab.training.presets.proxy_synthesis import PS_BASES


def _import_families() -> None:
    """Import every module of this package, so that each family's methods register themselves (:func:`method`)."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        importlib.import_module(f"{__name__}.{info.name}")


_import_families()


def list_methods() -> list[str]:
    """Method names accepted by :func:`get` (variants are options, see the module docstring)."""
    return METHODS.names()


def list_datasets() -> list[str]:
    """Dataset names with a :class:`DatasetSpec`."""
    return sorted(DATASETS)


def list_profiles() -> list[str]:
    """``smoke``, ``quick``, ``paper`` (:data:`dmllab.profiles.PROFILES`)."""
    return list(PROFILES)


def _lookup(table: dict, name: str, what: str) -> Any:
    if name not in table:
        raise KeyError(f"unknown {what} {name!r}; valid {what}s: {', '.join(sorted(table))}")
    return table[name]


def _method(name: str) -> Method:
    return _lookup({n: METHODS.get(n) for n in METHODS}, name, "method")


def method_options(method: str) -> list[str]:
    """Keyword options accepted by ``get(method, ...)``."""
    return _method(method.split(":", 1)[0]).options


def check(cfg: ExperimentConfig) -> ExperimentConfig:
    """Raise ValueError if ``cfg``'s schedule has an event that cannot happen
    (:func:`dmllab.training.schedules.check_schedule`); return ``cfg``. The trainer's protocol checks again
    before training, after any override."""
    s = cfg.schedule
    schedules.check_schedule(epochs=s.epochs, scheduler=s.scheduler, milestones=s.milestones)
    check_callbacks(cfg, epochs=s.epochs, two_stage=cfg.run.two_stage)
    return cfg


def get(
    method: str, dataset: str, profile: str = "paper", *, tuned: bool = True, **options: Any
) -> ExperimentConfig:
    """The preset config of ``method`` on ``dataset`` at ``profile`` (module docstring).

    The method's ``paper`` config is built from the paper base, then the profile's overlay and the method's
    own overlay for that profile are applied (:mod:`dmllab.training.presets.profiles`); on the quick profile
    the method's recipe chosen on validation (``results/tuning/quick_best.csv``, :mod:`.tuned`) comes last
    (``tuned=False``: without it).

    Options are method toggles (``fast=False``, ``variant="HLN"``, ``base="normsoftmax"``, ``pooling="kmax",
    k=4``, ``two_stage=True``); unknown ones raise ValueError listing the valid options. Nothing else is read
    from disk.
    """
    name, _, short = method.partition(":")
    m = _method(name)
    spec = _lookup(DATASETS, dataset, "dataset")
    overlay = _lookup(PROFILE_OVERLAYS, profile, "profile")
    if short:
        if m.variant_option is None:
            with_variants = [n for n in METHODS if METHODS.get(n).variant_option]
            raise ValueError(f"method {name!r} takes no ':variant' suffix (only {', '.join(with_variants)})")
        options = {m.variant_option: short, **options}
    unknown = sorted(set(options) - set(m.options))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for method {name!r}; valid options: {', '.join(m.options) or 'none'}"
        )
    defaults = m.profile_options.get(profile)
    if defaults is not None:
        options = {**defaults(options), **options}
    cfg = m.build(paper_base(spec), spec, **options)
    cfg = apply_overlay(overlay(cfg, spec), m.overlays.get(profile, {}))
    label = name if m.variant_option is None else f"{name}:{options.get(m.variant_option, m.default_variant)}"
    cfg = dataclasses.replace(cfg, method=label)
    if tuned:
        cfg = tuned_recipes.tuned(cfg, options, lambda unit: get(unit, dataset, profile, tuned=False))
    return check(cfg)


def describe(cfg: ExperimentConfig) -> str:
    """One line with the key hyper-parameters of a config (for ``dmllab presets``)."""
    m, o, d, s = cfg.model, cfg.optim, cfg.data, cfg.schedule
    loss = str(cfg.loss)
    batch = (
        f"{d.batch_size}={d.batch_size // d.per_class}x{d.per_class}"
        if d.per_class
        else f"{d.batch_size} random"
    )
    head = (
        f"{m.pooling.name}{m.pooling.get('k', '')}"
        + (f"+{m.norm}" if m.norm != "none" else "")
        + ("+l2" if m.l2_normalize else "")
    )
    lrs = f"lr {_fmt(o.lr)}" + (f"/proxy {_fmt(o.lr_proxies)}" if o.lr_proxies is not None else "")
    sched = s.scheduler
    if s.scheduler == "multistep":
        sched += f"({','.join(map(str, s.milestones))}x{_fmt(s.factor)})"
    heating = cfg.callback("heating")
    if heating is not None:
        sched += f"@{heating.get('epoch')}heat"
    ft = cfg.finetune
    if ft.epochs:
        sched += f" +finetune {ft.epochs} ep (alpha x{_fmt(ft.alpha_factor)}, lr x{_fmt(ft.lr_factor)}) of {ft.parent_method}"
    proto = "two-stage" if cfg.run.two_stage else f"fixed on {d.train_split}"
    return (
        f"{cfg.method:<28} {cfg.dataset:<9} {cfg.profile:<6} {m.backbone.name}{'(pt)' if m.pretrained else ''} "
        f"emb {m.embedding_dim} {head} | {loss} | {o.name}{_optim_extra(o)} {lrs} | batch {batch} | "
        f"{s.epochs}+{s.warmup_epochs}w ep {sched} {proto}"
        + (f" | fast dev run {cfg.run.fast_dev_run}" if cfg.run.fast_dev_run else "")
    )


def _optim_extra(o: Any) -> str:
    if o.name in ("adam", "adamw", "rmsprop"):
        return f"(eps {_fmt(o.eps)}" + (f", wd {_fmt(o.weight_decay)})" if o.weight_decay else ")")
    return f"(momentum {_fmt(o.momentum)})"


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
