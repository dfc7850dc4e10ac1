"""The quick profile's tuned recipes, package data: ``dmllab/training/presets/recipes/quick.csv`` (the chosen trial
per method of ``dmllab tune``, :mod:`dmllab.pipeline.tune`), read by :func:`dmllab.training.presets.get`. The file
ships with the package; a profile that reads recipes without its file is an error naming it, never a silent
fallback to the untuned presets (which would be other run keys).

A recipe is what the tuning chose for one method on validation: the trunk lr (``optim.lr``), the embedding
layer's lr (``optim.lr_embedding``), the proxies' lr as a ratio of the embedding lr where the method trains its
proxies at their own lr ("+fast", ``optim.lr_proxies``), and the loss hyper-parameter it tunes
(``loss.<name>``). A method absent from the file keeps its preset; a changed recipe changes the run keys.

Ablation arms keep their method's recipe and change only their switch, as the papers do: the recipe replaces a
value of the preset only where the arm has the method's own (untuned) value. An arm that switches a value
(ProxyNCA++ ``scale=False``: T = 1; ``fast=False``: no proxy lr of its own; a heated variant's heating) keeps its
value, and an option given by name to :func:`~dmllab.training.presets.get` (``temperature=``, ``alpha=``) always
wins. "+fast" arms keep their ratio to the embedding lr (the method's tuned ratio where it has one), so their
proxies follow a tuned embedding lr. Heated-up's heated variants (HLN, HBN) are arms of their unheated method
(LN, BN): :func:`unit`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from dmllab.spec import Pairs, pairs
from dmllab.training.config import ExperimentConfig

PROFILES = ("quick",)  # the profiles whose presets read a tuned recipe
LOSS_PREFIX = "param_loss_"  # the recipes' column of a tuned loss hyper-parameter: param_loss_<name>
RECIPES = Path(__file__).resolve().parent / "recipes"


def best_csv(profile: str) -> Path:
    """The chosen recipes of ``profile`` the presets read: ``dmllab/training/presets/recipes/<profile>.csv``."""
    return RECIPES / f"{profile}.csv"


class RecipesMissingError(FileNotFoundError):
    """A profile's tuned recipes are not where the presets read them."""


@dataclass(frozen=True)
class Recipe:
    """A tuned recipe (module docstring); ``proxy_ratio`` None: the method has no proxy lr of its own."""

    lr: float
    lr_embedding: float
    proxy_ratio: float | None = None
    loss: Pairs = ()


def unit(label: str) -> str:
    """The tuned method of a preset label (``ExperimentConfig.method``): the label itself, except Heated-up's
    heated variants, which are arms of the unheated one (``heated_softmax:HLN`` -> ``heated_softmax:LN``)."""
    name, _, variant = label.partition(":")
    if name == "heated_softmax" and variant.startswith("H"):
        return f"{name}:{variant[1:]}"
    return label


def _number(text: str | None) -> float | None:
    return None if text in (None, "") or text.lower() == "nan" else float(text)


@lru_cache(maxsize=8)
def _read(path: str, stamp: tuple[int, int]) -> dict[tuple[str, str], Recipe]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = {}
    for row in rows:
        loss = {k[len(LOSS_PREFIX) :]: _number(v) for k, v in row.items() if k.startswith(LOSS_PREFIX)}
        out[(row["variant"], row["dataset"])] = Recipe(
            lr=float(row["param_lr"]),
            lr_embedding=float(row["param_lr_embedding"]),
            proxy_ratio=_number(row.get("param_proxy_ratio")),
            loss=pairs({k: v for k, v in loss.items() if v is not None}),
        )
    return out


def recipes(profile: str) -> dict[tuple[str, str], Recipe]:
    """``(method, dataset) -> Recipe`` of :func:`best_csv`; re-read when it changes.

    Raises:
        RecipesMissingError: the file is missing (an install without the package data, or a deleted file).
    """
    path = best_csv(profile)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise RecipesMissingError(
            f"the {profile} presets' tuned recipes {path} are missing: reinstall dmllab, restore the file from git, "
            f"or write it with `dmllab tune --profile {profile}` (docs/guide/tuning.md)"
        ) from None
    return _read(str(path), (st.st_mtime_ns, st.st_size))


def _embedding_lr(cfg: ExperimentConfig) -> float:
    o = cfg.optim
    return o.lr if o.lr_embedding is None else o.lr_embedding


def _significant(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def apply(
    cfg: ExperimentConfig, default: ExperimentConfig, recipe: Recipe, explicit: Collection[str] = ()
) -> ExperimentConfig:
    """``cfg`` (an arm of a method) with the method's tuned ``recipe`` where ``cfg`` keeps the value of
    ``default`` (the method's untuned preset); ``explicit``: option names given to ``presets.get``, which win
    over a tuned loss hyper-parameter of the same name (module docstring)."""
    o = cfg.optim
    emb = _embedding_lr(cfg)
    lr = recipe.lr if o.lr == default.optim.lr else o.lr
    new_emb = recipe.lr_embedding if emb == _embedding_lr(default) else emb
    proxies = o.lr_proxies
    if o.lr_proxies is not None:  # "+fast": the proxies keep their ratio to the embedding lr
        ratio = o.lr_proxies / emb
        d = default.optim
        same = d.lr_proxies is not None and math.isclose(ratio, d.lr_proxies / _embedding_lr(default))
        new_ratio = recipe.proxy_ratio if same and recipe.proxy_ratio is not None else ratio
        if new_ratio != ratio or new_emb != emb:
            proxies = _significant(new_ratio * new_emb)
    leaf = cfg.loss.leaf  # the method's own loss, under any wrapper (Proxy Synthesis, mixup)
    kwargs, base = leaf.kw, default.loss.leaf.kw
    for key, value in recipe.loss:
        if key not in explicit and kwargs.get(key) == base.get(key):
            kwargs[key] = value
    # an embedding lr equal to the trunk's stays implicit where it was (the preset's own values keep its run key)
    lr_embedding = None if o.lr_embedding is None and new_emb == lr else new_emb
    return replace(
        cfg,
        optim=replace(o, lr=lr, lr_embedding=lr_embedding, lr_proxies=proxies),
        loss=cfg.loss.with_leaf(replace(leaf, kwargs=pairs(kwargs))),
    )


def untuned(cfg: ExperimentConfig) -> str | None:
    """One line when ``cfg`` runs on a profile whose presets read tuned recipes but its method has none (so it runs
    its untuned preset while the other methods run theirs), naming the ``dmllab tune`` command that writes it;
    None when it is tuned or its profile reads no recipes."""
    if cfg.profile not in PROFILES:
        return None
    method = unit(cfg.method)
    if (method, cfg.dataset) in recipes(cfg.profile):
        return None
    return (
        f"{cfg.method} on {cfg.dataset} has no tuned {cfg.profile} recipe, so it runs its untuned preset; tune it "
        f"with `dmllab tune --profile {cfg.profile} --methods {method}`"
    )


def tuned(
    cfg: ExperimentConfig,
    options: Mapping[str, object],
    untuned: Callable[[str], ExperimentConfig],
) -> ExperimentConfig:
    """``cfg`` with the recipe of its method from :func:`best_csv` (unchanged without one). ``untuned(label)``
    gives the method's untuned preset; ``options`` are the options given to ``presets.get``."""
    if cfg.profile not in PROFILES:
        return cfg
    method = unit(cfg.method)
    recipe = recipes(cfg.profile).get((method, cfg.dataset))
    if recipe is None:
        return cfg
    return apply(cfg, untuned(method), recipe, explicit=set(options))
