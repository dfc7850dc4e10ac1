"""Proxy Anchor Figs. 11-14 (supplement): t-SNE of the test embeddings laid out on a grid."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dmllab.experiments import figures
from dmllab.experiments.artifact import Artifact, Figure, Run
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params
from dmllab.experiments.proxy_anchor._common import figure_images, pa_config, with_image_files


def runs(params: Params) -> list[Run]:
    """The default Proxy Anchor run of the profile (shared with Tables 2-7)."""
    cfg = pa_config(params.profile, params["dataset"])
    return [Run(cfg, s, variant="Proxy Anchor") for s in params.seeds]


def tsne_grid(emb: np.ndarray, labels: np.ndarray, *, n: int, seed: int, perplexity: float) -> pd.DataFrame:
    """t-SNE (:func:`dmllab.experiments.figures.tsne`) of ``n`` random test embeddings (L2-normalised), each point
    then assigned to a cell of a square grid (:func:`dmllab.plots.retrieval.grid_assignment`)."""
    from dmllab.plots.retrieval import grid_assignment

    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(labels), size=min(n, len(labels)), replace=False))
    x = emb[pick] / np.maximum(np.linalg.norm(emb[pick], axis=1, keepdims=True), 1e-12)
    xy = figures.tsne(x, seed=seed, perplexity=perplexity)
    cells = grid_assignment(xy)
    return pd.DataFrame(
        {
            "index": pick,
            "label": labels[pick],
            "x": xy[:, 0],
            "y": xy[:, 1],
            "gx": cells[:, 0],
            "gy": cells[:, 1],
        }
    )


def rows(params: Params, lookup: Lookup) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from dmllab.plots.retrieval import neighbour_agreement
    from dmllab.results import tidy

    out: list[dict[str, Any]] = []
    tables = []
    for run in runs(params):
        emb, labels, ds = lookup.embed(run)
        t = tsne_grid(
            emb.numpy(), labels.numpy(), n=params["points"], seed=run.seed, perplexity=params["perplexity"]
        )
        t = with_image_files(t, ds)
        share = t["label"].value_counts(normalize=True)
        agree = neighbour_agreement(t[["gx", "gy"]].to_numpy(), t["label"].to_numpy())
        out += tidy(
            {"grid_same_class_neighbours": 100 * agree, "chance_same_class": 100 * float((share**2).sum())},
            percent=False,
            **run.labels,
            run_id=lookup.place(run).key,  # derived from this run: every row names its run
        )
        tables.append(t.assign(seed=run.seed))
    return out, {"tsne": pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()}


def _figure(tables: Any) -> Any:
    import matplotlib.pyplot as plt

    from dmllab.plots.retrieval import image_grid, thumbnail

    t = tables["tsne"]
    t = t[t["seed"] == t["seed"].min()]
    profile = str(tables["rows"]["profile"].iloc[0]) if "profile" in tables["rows"] else "quick"
    cfg = pa_config(profile, "cars")
    images = figure_images(t, cfg)
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.4))
    axes[0].scatter(t["x"], t["y"], c=t["label"], cmap="tab20", s=8)
    axes[0].set(title="t-SNE of test embeddings (colour: class)", xlabel="t-SNE 1", ylabel="t-SNE 2")
    size = 32 if len(t) <= 900 else 16
    image_grid(axes[1], t[["gx", "gy"]].to_numpy(), [thumbnail(images[int(i)], size) for i in t["index"]])
    axes[1].set_title("the same points on a grid (linear assignment)")
    fig.tight_layout()
    return fig


ARTIFACT = Artifact(
    id="pa_fig11_tsne",
    paper="proxy_anchor",
    label="Fig. 11",
    title="t-SNE of the test embeddings on a grid",
    description=(
        "Proxy Anchor supplement Figs. 11-14: Barnes-Hut t-SNE of the test embeddings, images laid out on a grid "
        "(Jonker-Volgenant), showing that similar images are grouped. dmllab: the default Proxy Anchor run of the "
        "profile (shared with Tables 2-7); a random subset of test images per seed, scikit-learn TSNE (PCA init) "
        "on the L2-normalised embeddings, each point assigned to a square grid cell by an exact linear "
        "assignment (scipy `linear_sum_assignment`). The coordinates are the extra table `tsne`; the rows "
        "quantify the figure: the share of grid neighbours of the same class vs chance (sum of squared class "
        "shares). No claim: the figure is qualitative, and 'above chance' has no baseline a trained network "
        "could fail against."
    ),
    parameters={
        "smoke": {"dataset": "cars", "points": 49, "perplexity": 10.0},
        "quick": {"dataset": "cars", "points": 400, "perplexity": 30.0},
        "paper": {"seeds": [0, 1, 2], "dataset": "cars", "points": 900, "perplexity": 30.0},
    },
    parameter_help={
        "dataset": "paper dataset (Cars; the offline benchmark on smoke/quick)",
        "points": "test images embedded and laid out",
        "perplexity": "t-SNE perplexity",
    },
    runs=runs,
    rows=rows,
    tables=("tsne",),
    figures=(
        Figure(_figure, caption="t-SNE scatter and the grid layout of the same test images (first seed)."),
    ),
)
