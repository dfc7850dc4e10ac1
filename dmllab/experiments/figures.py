"""What artifacts' figures share: t-SNE (:func:`tsne`) and the bars per variant with the paper's values beside
them (:func:`bar_figure`), a swept parameter's curve (:func:`sweep_figure`), drawn from the tidy CSVs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def tsne(points: Any, seed: int = 0, perplexity: float = 30.0) -> Any:
    """2-D t-SNE (scikit-learn, PCA init) of ``points`` (N, D) as float32; perplexity capped at (N - 1) / 3 (and
    at least 2) for small N."""
    import numpy as np
    from sklearn.manifold import TSNE

    x = np.asarray(points, dtype=np.float32)
    perp = float(min(perplexity, max(2.0, (len(x) - 1) / 3)))
    return TSNE(n_components=2, perplexity=perp, init="pca", random_state=seed).fit_transform(x)


PAPER_COLOUR = "#d62728"


def is_paper_profile(rows: Any) -> bool:
    """Whether ``rows`` are the paper profile's (the paper's values are then drawn as printed; elsewhere as their
    differences to an anchor, drawn from the reproduced anchor: absolute points do not transfer)."""
    return "profile" in rows and len(rows) > 0 and set(rows["profile"].astype(str)) == {"paper"}


def paper_values(tables: Mapping[str, Any], metric: str, keys: Sequence[str]) -> dict[tuple[str, ...], float]:
    """``{(row[k] for k in keys): the paper's value}`` of the printed cells the artifact's rows face
    (``tables["paper"]``, :func:`dmllab.experiments.compare.paper_values`); empty where none."""
    paper = tables.get("paper")
    if paper is None or len(paper) == 0 or any(k not in paper for k in keys):
        return {}
    sel = paper[(paper["metric"] == metric) & paper["paper"].notna()]
    return {tuple(str(r[k]) for k in keys): float(r["paper"]) for _, r in sel.iterrows()}


def anchored(
    reproduced: Mapping[Any, float], paper: Mapping[Any, float], order: Sequence[Any], relative: bool
) -> tuple[dict[Any, float], Any]:
    """Where to draw the paper's value of each key of ``order``: as printed, or (``relative``) the reproduced
    value of the anchor (the first key of ``order`` the paper prints) plus the paper's difference to it; and the
    anchor (None when drawn as printed)."""
    if not relative:
        return {k: paper[k] for k in order if k in paper}, None
    anchor = next((k for k in order if k in paper and k in reproduced), None)
    if anchor is None:
        return {}, None
    return {k: reproduced[anchor] + paper[k] - paper[anchor] for k in order if k in paper}, anchor


def paper_legend(ax: Any, anchor: Any) -> None:
    """The legend entry of the paper's markers (and how they are placed), outside the axes on the right."""
    from matplotlib.lines import Line2D

    label = "paper" if anchor is None else f"paper, as its\ndifference to\n{anchor}"
    handles, labels = ax.get_legend_handles_labels()
    marker = Line2D([], [], color=PAPER_COLOUR, marker="D", ls="", markersize=6, label=label)
    ax.legend([*handles, marker], [*labels, label], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def bar_figure(
    tables: Mapping[str, Any],
    *,
    metric: str = "R@1",
    order: Sequence[str] | None = None,
    title: str = "",
    hue: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Any:
    """Bars of ``metric`` per variant (mean over seeds, std error bars, the seeds as points), one panel per
    dataset, and the paper's value of each bar where it prints one (:func:`anchored`: on smoke and quick as its
    difference to the first bar the paper prints, drawn from that bar). ``labels``: a tick label per variant."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    rows = tables["rows"]
    data = rows[rows["metric"] == metric]
    dsets = list(dict.fromkeys(data["dataset"])) or ["-"]
    width = max(5.0, 0.9 * (len(order or set(data["variant"])) + 2)) * len(dsets) ** 0.6
    fig, axes = plt.subplots(1, len(dsets), figsize=(width, 4.0), squeeze=False)
    keys = ["variant", "dataset"] + ([hue] if hue else [])
    paper = paper_values(tables, metric, keys)
    for ax, dset in zip(axes[0], dsets):
        sub = data[data["dataset"] == dset]
        present = [v for v in (order or dict.fromkeys(sub["variant"])) if v in set(sub["variant"])]
        if sub.empty:
            ax.set_axis_off()
            continue
        common = dict(data=sub, x="variant", y="value", order=present, ax=ax)
        sns.barplot(**common, hue=hue or "variant", legend=bool(hue), errorbar="sd", capsize=0.15)
        sns.stripplot(**common, color="black", size=3, dodge=False)
        levels = list(dict.fromkeys(sub[hue].astype(str))) if hue else [None]
        slots = [(v, h) for v in present for h in levels]
        means = {
            (v, h): float(part["value"].mean())
            for (v, h) in slots
            if len(part := sub[(sub["variant"] == v) & ((sub[hue].astype(str) == h) if hue else True)])
        }
        cell = {(v, h): (v, str(dset), *((h,) if hue else ())) for v, h in slots}
        printed = {slot: paper[key] for slot, key in cell.items() if key in paper}
        relative = not is_paper_profile(rows)
        if hue:  # each group of bars anchored at its own first bar: the comparison is within the group
            where, anchor = {}, "the first bar of its group" if relative else None
            for v in present:
                where.update(anchored(means, printed, [(v, h) for h in levels], relative)[0])
        else:
            where, anchor = anchored(means, printed, slots, relative)
            anchor = None if anchor is None else anchor[0]
        for (v, h), y in where.items():
            i, j = present.index(v), levels.index(h)
            x = i if not hue else i - 0.4 + (j + 0.5) * 0.8 / len(levels)
            ax.plot([x], [y], marker="D", color=PAPER_COLOUR, markersize=6, ls="", zorder=5)
        if where:
            paper_legend(ax, anchor)
        ax.set(xlabel="", ylabel=f"{metric} (%)")
        ax.set_title(f"{title} ({dset})" if title else str(dset), fontsize=10)
        if labels:
            ax.set_xticks(range(len(present)), [labels.get(v, v) for v in present], fontsize=8)
        else:
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
    xlabel: str = "",
    title: str = "",
    mark: Any = None,
) -> Any:
    """``metric`` against ``param_<param>`` on a log scale: mean over seeds with a shaded +- one std (as
    ProxyNCA++'s Figs. 4-6), one line per dataset, a dotted line at ``mark`` where given."""
    import matplotlib.pyplot as plt
    import pandas as pd

    rows, col = tables["rows"], f"param_{param}"
    data = rows[(rows["metric"] == metric)].copy()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    if col not in data.columns or data.empty:
        ax.text(0.5, 0.5, "no rows", ha="center")
        return fig
    data[col] = pd.to_numeric(data[col], errors="coerce")
    for name, sub in data.dropna(subset=[col]).groupby("dataset", sort=False):
        s = sub.groupby(col, sort=False)["value"].agg(["mean", "std"]).reset_index().sort_values(col)
        std = s["std"].fillna(0.0)
        ax.plot(s[col], s["mean"], marker="o", label=str(name))
        ax.fill_between(s[col], s["mean"] - std, s["mean"] + std, alpha=0.2)
    if mark is not None:
        ax.axvline(mark, color="grey", ls=":", lw=1)
    ax.set(xscale="log", xlabel=xlabel or param, ylabel=f"{metric} (%), mean +- std over seeds")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
