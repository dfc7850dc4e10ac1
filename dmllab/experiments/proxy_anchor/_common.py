"""The Proxy Anchor paper's facts shared by its artifacts: its preset with the settings the artifacts vary, and
the cell names of ``results/reference/proxy_anchor.csv``.

Every config is the Proxy Anchor preset plus only the keys an artifact varies (:func:`dmllab.experiments.kit.config`),
so the default Proxy Anchor run of a profile is shared by Tables 2-7 and Figs. 5/6 (one run set per profile).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmllab.experiments import analogue, kit

# Printed column prefixes per dataset (Tables 2-4).
COLUMN_PREFIX = {"cub": "CUB-200-2011 ", "cars": "Cars-196 ", "sop": "", "inshop": ""}
TABLE = {"cub": "Table 2", "cars": "Table 2", "sop": "Table 3", "inshop": "Table 4"}


def with_image_files(table: Any, dataset: Any) -> Any:
    """``table`` with an ``image`` column naming the file of each row's ``index`` where ``dataset`` is read from a
    folder (its ``image_path``), so the figure is drawn from the table wherever the data root is; unchanged for a
    dataset rendered in memory (the offline benchmark: :func:`figure_images` renders it again)."""
    path = getattr(dataset, "image_path", None)
    return (
        table
        if path is None or not len(table)
        else table.assign(image=[str(path(int(i))) for i in table["index"]])
    )


def figure_images(table: Any, cfg: Any) -> dict[int, Any]:
    """``{index: PIL image}`` of a figure table's rows: from the files its ``image`` column names, else from
    ``cfg``'s test split without a transform (the data are regenerated or read, never stored as results)."""
    if "image" in table and table["image"].notna().all():
        from pathlib import Path

        from dmllab.data.real import load_image

        return {int(i): load_image(Path(p)) for i, p in zip(table["index"], table["image"])}
    from dmllab.data.loaders import open_split

    ds = open_split(cfg.data, cfg.data.test_split, train=False, raw=True)
    return {int(i): ds[int(i)][0] for i in table["index"]}


def config(method: str, profile: str, dataset: str, *, overrides: Mapping[str, Any] | None = None) -> Any:
    """``method``'s preset on the paper dataset ``dataset`` (the offline benchmark on smoke/quick)."""
    return kit.config(method, kit.benchmark_for(profile, dataset), profile, overrides=overrides)


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
    return kit.config(
        "proxy_anchor",
        kit.benchmark_for(profile, dataset),
        profile,
        overrides={"model.embedding_dim": dim, "data.batch_size": batch, **(overrides or {})},
        **loss,
    )


def differs(specific: Any, dataset: str = "cub", method: str = "proxy_anchor") -> Any:
    """A Proxy Anchor claim's ``differs``: ``specific``, the profile's analogue of ``method`` on ``dataset``, and on
    the paper profile ResNet-50 for BN-Inception (:func:`dmllab.experiments.analogue.differs`)."""
    return analogue.differs(specific, method, dataset, paper=analogue.BN_INCEPTION)


def recall_column(dataset: str, metric: str) -> str:
    """The printed column of ``metric`` (R@K) on ``dataset`` in Tables 2-4 ("CUB-200-2011 R@1", "R@10")."""
    return f"{COLUMN_PREFIX.get(dataset, '')}{metric}"


def errorbar_lines(ax: Any, data: Any, x: str, hue: str, *, metric: str = "R@1", logx: bool = False) -> None:
    """Mean +- std over seeds of ``metric`` against ``x``, one line per ``hue`` value."""
    sel = data[data["metric"] == metric]
    for name, part in sel.groupby(hue, sort=False):
        stats = part.groupby(x)["value"].agg(["mean", "std"]).sort_index()
        mean, std = stats["mean"], stats["std"].fillna(0)
        ax.errorbar(stats.index.astype(float), mean, yerr=std, marker="o", capsize=3, label=str(name))
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_ylabel(f"{metric} (%)")
    ax.legend(fontsize=8)
