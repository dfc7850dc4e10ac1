"""What the Proxy Anchor artifacts share: the one way each config is built (so identical configs are one run),
the paper's dataset names, and the cell names of ``results/reference/proxy_anchor.csv``.

Every config is ``presets.get(method, dataset, profile)`` plus only the keys an artifact varies, and a key is
replaced only when it differs from the preset, so the default Proxy Anchor run of a profile is shared by
Tables 2-7 and Figs. 5/6 (one run set per profile).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmllab.experiments.base import Params, Run

# Printed column prefixes per dataset (Tables 2-4).
COLUMN_PREFIX = {"cub": "CUB-200-2011 ", "cars": "Cars-196 ", "sop": "", "inshop": ""}
TABLE = {"cub": "Table 2", "cars": "Table 2", "sop": "Table 3", "inshop": "Table 4"}
TOY_PROFILES = ("smoke", "quick")


def dataset_for(profile: str, dataset: str) -> str:
    """The offline benchmark stands in for every real dataset on the smoke/quick profiles."""
    return "synthetic" if profile in TOY_PROFILES else dataset


def config(
    method: str,
    profile: str,
    dataset: str,
    *,
    overrides: Mapping[str, Any] | None = None,
    **options: Any,
) -> Any:
    """``presets.get(method, dataset_for(profile, dataset), profile, **options)`` with ``overrides`` (dotted keys)
    applied only where they change the preset (so the unchanged config hashes like the preset)."""
    from dmllab.training import presets

    cfg = presets.get(method, dataset_for(profile, dataset), profile, **options)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, name = key.partition(".")
        current = getattr(getattr(cfg, section), name) if name else getattr(cfg, section)
        if current != value:
            cfg = cfg.replace(key, value)
    return presets.check(cfg)


def pa_config(
    profile: str,
    dataset: str,
    *,
    dim: int | None = None,
    batch: int | None = None,
    alpha: float | None = None,
    delta: float | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Any:
    """Proxy Anchor's preset with the embedding size, batch size, alpha and delta an artifact varies (alpha and
    delta are passed to the preset only when given: a given one wins over the quick profile's tuned value)."""
    loss = {k: v for k, v in (("alpha", alpha), ("delta", delta)) if v is not None}
    return config(
        "proxy_anchor",
        profile,
        dataset,
        overrides={"model.embedding_dim": dim, "data.batch_size": batch, **(overrides or {})},
        **loss,
    )


def seeds_runs(cfg: Any, params: Params, variant: str, **tags: Any) -> list[Run]:
    """One :class:`Run` of ``cfg`` per seed of ``params``."""
    return [Run(cfg, seed, variant=variant, tags=tuple(tags.items())) for seed in params.seeds]


def recall_column(dataset: str, metric: str) -> str:
    """The printed column of ``metric`` (R@K) on ``dataset`` in Tables 2-4 ("CUB-200-2011 R@1", "R@10")."""
    return f"{COLUMN_PREFIX.get(dataset, '')}{metric}"


def stand_in(dataset: str) -> str:
    """The paper dataset whose cells a row faces (the benchmark faces CUB)."""
    return "cub" if dataset in ("synthetic", "digits") else dataset


def mean_over(df: Any, metric: str, **where: Any) -> Any:
    """Per-seed mean of ``metric`` over the rows matching ``where`` (a ``pd.Series`` indexed by seed)."""
    from dmllab.experiments.compare import per_seed

    return per_seed(df, metric, **where)


def errorbar_lines(ax: Any, data: Any, x: str, hue: str, *, metric: str = "R@1", logx: bool = False) -> None:
    """Mean +- std over seeds of ``metric`` against ``x``, one line per ``hue`` value."""
    sel = data[data["metric"] == metric]
    for name, part in sel.groupby(hue, sort=False):
        stats = part.groupby(x)["value"].agg(["mean", "std"]).sort_index()
        ax.errorbar(
            stats.index.astype(float),
            stats["mean"],
            yerr=stats["std"].fillna(0),
            marker="o",
            capsize=3,
            label=str(name),
        )
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_ylabel(f"{metric} (%)")
    ax.legend(fontsize=8)


def load_trained(run: Run) -> tuple[Any, dict[str, Any]]:
    """The trained model of a stored ``run`` (``final.pt``) and the whole saved state (which holds the loss's
    state under ``"loss"`` where the protocol saves it)."""
    import torch

    from dmllab.training import export
    from dmllab.training.store import RunStore

    path = RunStore.checkpoint_dir(run.config, run.seed) / "final.pt"
    model = export.load_model(run.config, path)
    return model, torch.load(path, map_location="cpu", weights_only=True)


def embed_run(run: Run, split: str | None = None) -> tuple[Any, Any, Any]:
    """Embeddings (N, D), labels (N,) and dataset of ``split`` (default: the test split) under ``run``'s model."""
    from dmllab.training import export

    model, _ = load_trained(run)
    cfg = run.config.replace("run.device", "cpu")
    return export.embed_split(model, cfg, split or cfg.data.test_split)


def raw_dataset(cfg: Any, split: str) -> Any:
    """``split`` of ``cfg``'s dataset without a transform (images for figures; the data are regenerated or read,
    never stored as results)."""
    from dmllab.data import build_dataset

    kw = dict(cfg.data.dataset_kwargs)
    if cfg.data.dataset == "synthetic":
        kw["progress"] = False
    return build_dataset(cfg.data.dataset, cfg.data.root, split, transform=None, **kw)
