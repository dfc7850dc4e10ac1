"""Shared pieces of the ProxyNCA++ artifacts: preset configs per profile, the enhancement names, the reference
table's row names, and the two figure shapes (bars per variant, a sweep curve with mean +- std over seeds).

Runs are shared across artifacts by building the same config the same way (:func:`config`): the default
ProxyNCA++ preset of a profile is one run set used by every table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dmllab.experiments.base import Params

# The six enhancements in the paper's order (Sec. 3).
ENHANCEMENTS: tuple[str, ...] = ("prob", "scale", "cbs", "norm", "max", "fast")
PAPER_DATASETS: list[str] = ["cub", "cars", "sop", "inshop"]
# Tables 3-6 (and 14/15 rows) per dataset; the offline benchmark faces CUB's table.
SOTA_TABLE: dict[str, str] = {
    "cub": "Table 3",
    "cars": "Table 4",
    "sop": "Table 5",
    "inshop": "Table 6",
    "synthetic": "Table 3",
}
REF_DATASET: dict[str, str] = {
    "synthetic": "cub",
    "cub": "cub",
    "cars": "cars",
    "sop": "sop",
    "inshop": "inshop",
}
ROW_NAME: dict[str, str] = {"cub": "CUB", "cars": "CARS", "sop": "SOP", "inshop": "InShop"}
# The quick profile's 128-d embedding stands in for the paper's 2048-d (a quarter and a half: 32 and 64).
QUICK_DIMS: dict[int, int] = {512: 32, 1024: 64, 2048: 128}


def train_profile(profile: str) -> str:
    """The preset profile of an artifact profile (the paper profile trains the paper's setting)."""
    return profile


def config(method: str, dataset: str, profile: str, **options: Any) -> Any:
    """The preset config (``presets.get``) of ``method`` on ``dataset`` at ``profile`` with the method options;
    every artifact builds its configs through here, so equal options give the same run key."""
    from dmllab.training import presets

    return presets.get(method, dataset, profile, **options)


def pnpp(dataset: str, profile: str, **options: Any) -> Any:
    """The ProxyNCA++ preset (every enhancement on unless an option switches it off)."""
    return config("proxynca++", dataset, profile, **options)


def subset_options(enabled: Sequence[str]) -> dict[str, bool]:
    """ProxyNCA++ options with exactly the enhancements in ``enabled`` switched on."""
    unknown = set(enabled) - set(ENHANCEMENTS)
    if unknown:
        raise ValueError(f"unknown enhancements {sorted(unknown)}; valid: {ENHANCEMENTS}")
    return {e: e in enabled for e in ENHANCEMENTS}


def subset_name(enabled: Sequence[str]) -> str:
    """``prob+scale+cbs`` style (the reference table's ``config=`` note); ``baseline`` for none."""
    return "+".join(e for e in ENHANCEMENTS if e in enabled) or "baseline"


def datasets(params: Any) -> list[str]:
    return list(params["datasets"])


def ks_metrics(dataset: str) -> list[str]:
    """The metrics the paper prints for ``dataset`` (R@K and NMI on CUB/Cars; the benchmark faces CUB)."""
    from dmllab.training.presets import DATASETS

    spec = DATASETS[dataset]
    return [f"R@{k}" for k in spec.ks] + (["NMI"] if spec.nmi else [])


def reference_cells(paper: str = "pnpp") -> Any:
    """The reference table of ``paper`` (results/reference/<paper>.csv) as a DataFrame."""
    import pandas as pd

    from dmllab.paths import repo_root

    return pd.read_csv(repo_root() / "results" / "reference" / f"{paper}.csv")


# ------------------------------------------------------------------------------------------------ figures


def _mean_std(data: Any, keys: list[str]) -> Any:
    return data.groupby(keys, sort=False)["value"].agg(["mean", "std", "count"]).reset_index()


def bar_figure(
    tables: Mapping[str, Any],
    *,
    metric: str = "R@1",
    order: Sequence[str] | None = None,
    title: str = "",
    hue: str | None = None,
) -> Any:
    """Bars of ``metric`` per variant (mean over seeds, std error bars, the seeds as points), one panel per
    dataset."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    rows = tables["rows"]
    data = rows[rows["metric"] == metric]
    dsets = list(dict.fromkeys(data["dataset"])) or ["-"]
    fig, axes = plt.subplots(
        1,
        len(dsets),
        figsize=(max(5.0, 0.9 * (len(order or set(data["variant"])) + 2)) * len(dsets) ** 0.6, 3.8),
        squeeze=False,
    )
    for ax, dset in zip(axes[0], dsets):
        sub = data[data["dataset"] == dset]
        present = [v for v in (order or dict.fromkeys(sub["variant"])) if v in set(sub["variant"])]
        if sub.empty:
            ax.set_axis_off()
            continue
        sns.barplot(
            data=sub,
            x="variant",
            y="value",
            order=present,
            hue=hue or "variant",
            legend=bool(hue),
            errorbar="sd",
            ax=ax,
            capsize=0.15,
        )
        sns.stripplot(
            data=sub, x="variant", y="value", order=present, color="black", size=3, ax=ax, dodge=False
        )
        ax.set_xlabel("")
        ax.set_ylabel(f"{metric} (%)")
        ax.set_title(f"{title} ({dset})" if title else str(dset), fontsize=10)
        ax.tick_params(axis="x", rotation=35)
        for lab in ax.get_xticklabels():
            lab.set_horizontalalignment("right")
    fig.tight_layout()
    return fig


def sweep_figure(
    tables: Mapping[str, Any],
    param: str,
    *,
    metric: str = "R@1",
    logx: bool = True,
    xlabel: str | None = None,
    title: str = "",
    by: str | None = None,
    mark: float | None = None,
) -> Any:
    """``metric`` against ``param_<param>``: mean over seeds with a shaded +- one std (as the paper's Figs. 4-6),
    one line per ``by`` value (or per dataset)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    rows = tables["rows"]
    col = f"param_{param}"
    data = rows[(rows["metric"] == metric)].copy()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    if col not in data.columns or data.empty:
        ax.text(0.5, 0.5, "no rows", ha="center")
        return fig
    data[col] = pd.to_numeric(data[col], errors="coerce")
    data = data.dropna(subset=[col])
    group = by or "dataset"
    for name, sub in data.groupby(group, sort=False):
        s = _mean_std(sub, [col]).sort_values(col)
        std = s["std"].fillna(0.0)
        ax.plot(s[col], s["mean"], marker="o", label=str(name))
        ax.fill_between(s[col], s["mean"] - std, s["mean"] + std, alpha=0.2)
    if mark is not None:
        ax.axvline(mark, color="grey", ls=":", lw=1)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel or param)
    ax.set_ylabel(f"{metric} (%), mean +- std over seeds")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------- sweep claims


def at_value(df: Any, metric: str, param: str, value: float) -> Any:
    """Per-seed ``metric`` where ``param_<param>`` is (numerically close to) ``value``."""
    import numpy as np
    import pandas as pd

    col = f"param_{param}"
    sel = df[df["metric"] == metric]
    if col not in sel.columns:
        return sel.groupby("seed")["value"].mean().iloc[0:0]
    x = pd.to_numeric(sel[col], errors="coerce")
    return sel[np.isclose(x, value, rtol=1e-6, atol=0)].groupby("seed")["value"].mean()


def diff_at(df: Any, metric: str, param: str, better: float, worse: float) -> Any:
    """Per seed: ``metric`` at ``param = better`` minus at ``param = worse`` (paired on the seed)."""
    return (at_value(df, metric, param, better) - at_value(df, metric, param, worse)).dropna()


def sweep_runs(params: Params, build: Any, param: str, values: Sequence[float]) -> list[Any]:
    """One run per (dataset, value, seed): ``build(dataset, profile, value)`` -> config, tagged ``param``."""
    from dmllab.experiments.base import Run

    out = []
    for dataset in datasets(params):
        for v in values:
            cfg = build(dataset, params.profile, v)
            out += [Run(cfg, seed, variant=f"{param} {v:.4g}", tags=((param, v),)) for seed in params.seeds]
    return out
