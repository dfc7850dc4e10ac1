"""Proxy Anchor Fig. 4 (and supplement Figs. 7-10): top-4 retrievals of Proxy Anchor vs ProxyNCA."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dmllab.experiments.artifact import Artifact, Claim, Figure, Run
from dmllab.experiments.compare import paired
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params
from dmllab.experiments.proxy_anchor import fig1_convergence as conv
from dmllab.experiments.proxy_anchor._common import differs, figure_images, with_image_files

PA, PNCA = "Proxy Anchor", "ProxyNCA"


def runs(params: Params) -> list[Run]:
    """The convergence runs of Proxy Anchor and ProxyNCA (one protocol for both; Fig. 1 trains them)."""
    out = []
    for name in (PA, PNCA):
        cfg = conv.curve_config(conv.METHODS[name], params.profile, params["dataset"])
        out += [Run(cfg, s, variant=name) for s in params.seeds]
    return out


def top_k(emb: Any, k: int) -> np.ndarray:
    """Indices (N, k) of each embedding's k nearest other embeddings by cosine similarity."""
    import torch

    e = torch.nn.functional.normalize(emb.float(), dim=1)
    sim = e @ e.t()
    sim.fill_diagonal_(-float("inf"))
    return sim.topk(k, dim=1).indices.numpy()


def rows(params: Params, lookup: Lookup) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from dmllab.results import tidy

    out: list[dict[str, Any]] = []
    grid = []
    k = params["k"]
    for run in runs(params):
        emb, labels, ds = lookup.embed(run)
        nn_idx = top_k(emb, k)
        lab = labels.numpy()
        correct = lab[nn_idx] == lab[:, None]  # (N, k)
        out += tidy(
            {"P@4": float(correct.mean()), "R@1": float(correct[:, 0].mean())},
            **run.labels,
            run_id=lookup.place(run).key,  # derived from this run: every row a claim reads names its run
        )
        if run.seed == params.seeds[0]:
            rng = np.random.default_rng(params["query_seed"])
            queries = np.sort(rng.choice(len(lab), size=min(params["queries"], len(lab)), replace=False))
            for q in queries:
                base = {"variant": run.variant, "query": int(q)}
                grid.append({**base, "rank": 0, "index": int(q), "label": int(lab[q]), "correct": np.nan})
                for r, j in enumerate(nn_idx[q], start=1):
                    hit = float(correct[q, r - 1])
                    grid.append({**base, "rank": r, "index": int(j), "label": int(lab[j]), "correct": hit})
    table = pd.DataFrame(grid)
    return out, {"retrievals": with_image_files(table, ds)}


def _figure(tables: Any) -> Any:
    import matplotlib.pyplot as plt

    from dmllab.plots.retrieval import retrieval_grid, thumbnail

    table = tables["retrievals"]
    profile = str(tables["rows"]["profile"].iloc[0]) if "profile" in tables["rows"] else "quick"
    cfg = conv.curve_config("proxy_anchor", profile, "cars")
    images = figure_images(table, cfg)
    variants = list(dict.fromkeys(table["variant"]))
    fig, axes = plt.subplots(
        1, len(variants), figsize=(4.2 * len(variants), 0.9 * table["query"].nunique() + 1)
    )
    for ax, v in zip(np.atleast_1d(axes), variants):
        part = table[table["variant"] == v].sort_values(["query", "rank"])
        rows = [
            [
                (thumbnail(images[int(i)]), None if np.isnan(c) else bool(c))
                for i, c in zip(p["index"], p["correct"])
            ]
            for _, p in part.groupby("query")
        ]
        retrieval_grid(ax, rows)
        ax.set_title(f"{v}: query, then top-{len(rows[0]) - 1 if rows else 0}")
    fig.tight_layout()
    return fig


ARTIFACT = Artifact(
    id="pa_fig4_retrieval",
    paper="proxy_anchor",
    label="Fig. 4",
    title="Top-4 retrievals: Proxy Anchor vs ProxyNCA",
    description=(
        "Proxy Anchor Fig. 4 (and supplement Figs. 7-10): qualitative top-4 retrievals of Proxy Anchor and "
        "ProxyNCA on the test sets. dmllab: the Proxy Anchor and ProxyNCA runs of Fig. 1 (same protocol), "
        "first seed; the same random test queries for both; neighbours by cosine similarity, framed green "
        "(same class) or red. The rows quantify the figure on every test query: P@4 (share of correct images "
        "among the top 4) and R@1, per seed. The table holds dataset indices; the figure reads the images back "
        "from the dataset (regenerated on the quick profile)."
    ),
    parameters={
        "smoke": {"dataset": "cars", "k": 4, "queries": 3, "query_seed": 0},
        "quick": {"dataset": "cars", "k": 4, "queries": 6, "query_seed": 0},
        "paper": {"seeds": [0, 1, 2], "dataset": "cars", "k": 4, "queries": 6, "query_seed": 0},
    },
    parameter_help={
        "dataset": "paper dataset (Cars; the offline benchmark on smoke/quick)",
        "k": "neighbours shown",
        "queries": "queries shown",
        "query_seed": "draws the queries",
    },
    runs=runs,
    rows=rows,
    tables=("retrievals",),
    claims=(
        Claim(
            "Proxy Anchor's top-4 retrievals are more often of the query's class than ProxyNCA's (P@4)",
            lambda df: paired(df, "P@4", {"variant": PA}, {"variant": PNCA}),
            unit="P@4 points",
            differs=differs(
                "P@4 over every test query quantifies the paper's qualitative figure; the runs of Fig. 1 (one "
                "stage on train)",
                "cars",
            ),
            arms=("proxy_anchor",),
            worse_arms=("proxynca",),
            primary=True,
            key="p_at_4",
        ),
    ),
    figures=(Figure(_figure, caption="Queries (left) and their top-4 neighbours; green: same class."),),
)
