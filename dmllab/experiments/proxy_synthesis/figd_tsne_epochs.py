"""Proxy Synthesis Fig. D: t-SNE of a PS + Norm-softmax model at several epochs of training."""

from __future__ import annotations

from typing import Any

from dmllab.experiments.artifact import Artifact, Figure, Run
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params
from dmllab.experiments.proxy_synthesis import _common as C


def runs(params: Params) -> list[Run]:
    """One run per epoch count: the same config (schedule milestones included) with ``schedule.epochs`` = E.

    The run store keeps only each run's final weights, not per-epoch checkpoints, so the model "at epoch E" is
    a run trained for E epochs. Its first E epochs are those of the longest run (same seed, same per-epoch data
    order, the lr milestones of the full schedule that fall inside E epochs), up to numerical nondeterminism. The longest quick run
    is the shared Table 6 PS + Norm-softmax run.
    """
    out = []
    for ds in C.datasets(params.profile, params["datasets"]):
        full = C.config(params.profile, ds, "normsoftmax", ps=True)
        if params["full_epochs"] is not None:
            full = full.replace("schedule.epochs", params["full_epochs"])
        for e in params["epochs"]:
            cfg = full
            if (
                e != full.schedule.epochs
            ):  # drops at or after epoch E never fire within E epochs: leave them out
                cfg = full.replace("schedule.epochs", e).replace(
                    "schedule.milestones", tuple(m for m in full.schedule.milestones if m < e)
                )
            out += [Run(cfg, seed, variant=f"epoch {e}", tags=(("epochs", e),)) for seed in params.seeds]
    return out


def rows(params: Params, lookup: Lookup) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import pandas as pd

    all_runs = runs(params)
    out = lookup.rows(all_runs)
    pts = []
    for run in all_runs:
        if run.seed != params.seeds[0]:
            continue
        for split in ("train", "test"):
            name = run.config.data.trainval_split if split == "train" else run.config.data.test_split
            emb, y, _ = lookup.embed(run, name)
            points = C.tsne_by_class(
                emb, y, classes=params["tsne_classes"], per_class=params["tsne_per_class"], seed=run.seed
            )
            pts += [
                {"epochs": run.tag["epochs"], "split": split, "label": label, "x": x, "y": y}
                for label, x, y in points
            ]
    return out, {"tsne": pd.DataFrame(pts)}


def _plot(tables: Any) -> Any:
    import matplotlib.pyplot as plt

    t = tables["tsne"]
    epochs = sorted(t["epochs"].unique()) if len(t) else []
    fig, axes = plt.subplots(2, max(1, len(epochs)), figsize=(3.4 * max(1, len(epochs)), 6.6), squeeze=False)
    for j, e in enumerate(epochs):
        for i, split in enumerate(("train", "test")):
            s = t[(t["epochs"] == e) & (t["split"] == split)]
            axes[i][j].scatter(s["x"], s["y"], c=s["label"], cmap="tab20", s=10)
            axes[i][j].set_title(f"epoch {e}, {split}")
            axes[i][j].set_xticks([])
            axes[i][j].set_yticks([])
    fig.suptitle("PS Fig. D analogue: t-SNE of PS + Norm-softmax over training (first seed)")
    fig.tight_layout()
    return fig


def _plot_r1(tables: Any) -> Any:
    import matplotlib.pyplot as plt

    df = tables["rows"]
    s = df[df["metric"] == "R@1"].groupby("param_epochs")["value"].mean()
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.plot(s.index.astype(int), s.values, marker="o")
    ax.set(xlabel="epochs trained", ylabel="test R@1 (%)", title="R@1 of the Fig. D models")
    fig.tight_layout()
    return fig


ARTIFACT = Artifact(
    id="ps_figd_tsne_epochs",
    paper="proxy_synthesis",
    label="Fig. D",
    tier="appendix",
    title="t-SNE of PS + Norm-softmax embeddings over training epochs",
    description=(
        "PS Fig. D (CARS196): t-SNE of train and test embeddings of a PS + Norm-softmax model at epochs 2, 30, "
        "60 and 150. The run store keeps no per-epoch checkpoints, so each epoch is a run of the same config with "
        "`schedule.epochs` = E (the lr milestones unchanged, so its E epochs replay the first E epochs of the "
        "long run). Paper profile: Cars, E = 2, 30, 60, 150 (150 > the released 130 epochs). Quick: the offline "
        "benchmark, E = 1, 3, 8 (8 = the shared Table 6 run), one seed, no claims. Fig. D's synthetic "
        "embeddings and proxies (panels b, d, f) are not drawn: the t-SNE draws the original embeddings only."
    ),
    parameters={
        "smoke": {
            "seeds": [0],
            "epochs": [1, 2],
            "full_epochs": None,
            "datasets": ["synthetic"],
            "tsne_classes": 4,
            "tsne_per_class": 8,
        },
        "quick": {
            "seeds": [0],
            "epochs": [1, 3, 8],
            "full_epochs": None,
            "datasets": ["synthetic"],
            "tsne_classes": 10,
            "tsne_per_class": 20,
        },
        "paper": {
            "seeds": [0],
            "epochs": [2, 30, 60, 150],
            "full_epochs": 150,
            "datasets": ["cars"],
            "tsne_classes": 10,
            "tsne_per_class": 30,
        },
    },
    parameter_help={
        "epochs": "epoch counts shown",
        "full_epochs": "epochs of the longest run (None: the preset's)",
        "datasets": "paper-profile datasets",
        "tsne_classes": "classes drawn",
        "tsne_per_class": "points per class and split",
    },
    runs=runs,
    rows=rows,
    tables=("tsne",),
    figures=(
        Figure(_plot, caption="t-SNE of train (top) and test (bottom) embeddings per epoch."),
        Figure(_plot_r1, suffix="_r1", caption="Test R@1 of the same models."),
    ),
    not_reproduced={
        "Fig. D (b, d, f): synthetic embeddings and proxies": "the t-SNE draws the original embeddings only"
    },
)
