"""Heated-up Softmax Fig. 3: for plain softmax (SM), the gradient w.r.t. the feature against the feature norm."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dmllab.experiments.artifact import Artifact, Claim, Figure, Run
from dmllab.experiments.heated._common import SM, classifier, differs, hs_config
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params

_DIFFERS = differs(
    "per training image of the SM run of Tables 1/2, with its trained linear classifier where saved",
    variant="SM",
)


def runs(params: Params) -> list[Run]:
    """The SM runs of Tables 1/2."""
    cfg = hs_config(params.profile, params["dataset"], "SM")
    return [Run(cfg, s, variant="SM") for s in params.seeds]


def sm_gradients(emb: Any, labels: Any, weight: Any, bias: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample: ||f||, ||dl/df|| of the softmax cross-entropy <f, w> + b (autograd), and correctness."""
    import torch

    f = emb.detach().float().clone().requires_grad_(True)
    logits = f @ weight.t() + (0.0 if bias is None else bias)
    (grad,) = torch.autograd.grad(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"), f)
    correct = (logits.argmax(dim=1) == labels).numpy()
    return f.detach().norm(dim=1).numpy(), grad.norm(dim=1).numpy(), correct


def rows(params: Params, lookup: Lookup) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from scipy.stats import spearmanr

    from dmllab.metrics.classification import class_means
    from dmllab.results import tidy

    out: list[dict[str, Any]] = []
    bins = []
    for run in runs(params):
        emb, labels, ds = lookup.embed(run, run.config.data.train_split)
        loss, kind = classifier(lookup, run)
        if loss is not None:
            weight, bias = (
                loss.proxies.detach().float(),
                None if loss.bias is None else loss.bias.detach().float(),
            )
        else:  # class means scaled to the mean feature norm: a stand-in linear classifier
            weight, bias = class_means(emb, labels, ds.num_classes) * float(emb.norm(dim=1).mean()), None
        norm, grad, correct = sm_gradients(emb, labels, weight, bias)
        for group, mask in (("correct", correct), ("incorrect", ~correct)):
            if mask.sum() < 3:
                continue
            x, y = norm[mask], grad[mask]  # a constant one has no ranks to correlate: NaN, as spearmanr says
            rho = float(spearmanr(x, y).statistic) if np.ptp(x) > 0 and np.ptp(y) > 0 else float("nan")
            out += tidy(
                {"spearman_norm_grad": rho},
                percent=False,
                variant=group,
                dataset=run.config.dataset,
                seed=run.seed,
                classifier=kind,
                run_id=lookup.place(run).key,  # derived from this run: every row a claim reads names its run
            )
            edges = np.quantile(norm[mask], np.linspace(0, 1, params["bins"] + 1))
            which = np.clip(np.searchsorted(edges, norm[mask], side="right") - 1, 0, params["bins"] - 1)
            for b in range(params["bins"]):
                sel = which == b
                if sel.any():
                    bins.append(
                        {
                            "seed": run.seed,
                            "group": group,
                            "norm": float(norm[mask][sel].mean()),
                            "grad": float(grad[mask][sel].mean()),
                            "n": int(sel.sum()),
                        }
                    )
    return out, {"norm_bins": pd.DataFrame(bins)}


def _figure(tables: Any) -> Any:
    import matplotlib.pyplot as plt

    b = tables["norm_bins"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for (group, seed), part in b.groupby(["group", "seed"]):
        colour = "tab:green" if group == "correct" else "tab:red"
        label = f"{group}" if seed == b["seed"].min() else None
        ax.plot(part["norm"], part["grad"], marker="o", alpha=0.7, color=colour, label=label)
    ax.set_xlabel("feature norm ||f|| (bin mean)")
    ax.set_ylabel("||dl/df|| (bin mean)")
    ax.set(yscale="log", title="SM: gradient against feature norm (one line per seed)")
    ax.legend(fontsize=8)
    return fig


ARTIFACT = Artifact(
    id="heated_fig3_feature_norm",
    paper="heated",
    label="Fig. 3",
    title="SM: gradient against feature norm",
    description=(
        "Heated-up Softmax Fig. 3 / Sec. 3.3: with plain softmax (SM) the feature norm acts as an implicit "
        "temperature: correctly classified samples with a large norm get vanishing gradients, while the gradient "
        "of misclassified samples grows with the norm. dmllab: the SM run of Tables 1/2; per training image the "
        "norm of the feature and of the cross-entropy gradient w.r.t. it (autograd, the trained linear "
        "classifier where the run saves the loss state, else class means scaled to the mean norm: "
        "`param_classifier`); Spearman correlation per group and seed, and binned curves as the extra table "
        "`norm_bins`."
    ),
    parameters={
        "smoke": {"dataset": "cars", "bins": 4},
        "quick": {"dataset": "cars", "bins": 10},
        "paper": {"seeds": [0, 1, 2], "dataset": "cars", "bins": 20},
    },
    parameter_help={
        "dataset": "paper dataset (Cars; the offline benchmark on smoke/quick)",
        "bins": "feature-norm quantile bins",
    },
    runs=runs,
    rows=rows,
    tables=("norm_bins",),
    claims=(
        Claim(
            "correct samples: the gradient shrinks as the feature norm grows (minus Spearman rho)",
            lambda df: (
                -df[(df["metric"] == "spearman_norm_grad") & (df["variant"] == "correct")].set_index("seed")[
                    "value"
                ]
            ),
            unit="-rho",
            differs=_DIFFERS,
            arms=(SM,),
            primary=True,
            key="correct",
        ),
        Claim(
            "incorrect samples: the gradient grows with the feature norm (Spearman rho)",
            lambda df: df[(df["metric"] == "spearman_norm_grad") & (df["variant"] == "incorrect")].set_index(
                "seed"
            )["value"],
            unit="rho",
            differs=_DIFFERS,
            arms=(SM,),
            key="incorrect",
        ),
    ),
    figures=(
        Figure(_figure, caption="Binned gradient norm against feature norm, correct vs incorrect samples."),
    ),
)
