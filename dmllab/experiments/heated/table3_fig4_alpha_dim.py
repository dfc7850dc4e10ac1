"""Heated-up Softmax Table 3 (alpha x embedding size, SM and HBN) and Fig. 4 (cosine-similarity histograms)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dmllab.experiments import kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run, Smallest, printed
from dmllab.experiments.compare import members, paired
from dmllab.experiments.heated._common import BN, cell, differs, hs_config
from dmllab.experiments.heated._common import SM as SM_LABEL
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params

SM, HBN = "SM", "HBN (16 → 4)"


def bn(alpha: float) -> str:
    return f"α = {alpha:g}"


def runs(params: Params) -> list[Run]:
    ds, out = params["dataset"], []
    for d in params["dims"]:
        out += kit.seeds_runs(hs_config(params.profile, ds, "SM", dim=d), params, SM, dim=d)
        if d in params["alpha_dims"]:
            for a in params["alphas"]:
                out += kit.seeds_runs(
                    hs_config(params.profile, ds, "BN", alpha=a, dim=d), params, bn(a), dim=d, alpha=a
                )
        # HBN starts at the paper's alpha 16 (whatever alpha the profile's BN preset has): a fine-tune of the
        # BN alpha = 16 run at this size, heated to 4
        out += kit.seeds_runs(hs_config(params.profile, ds, "HBN", alpha=16.0, dim=d), params, HBN, dim=d)
    return out


def cosine_pairs(emb: Any, labels: Any, max_n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Cosine similarities of the positive and negative pairs among up to ``max_n`` random samples."""
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(labels), size=min(max_n, len(labels)), replace=False))
    e = emb[pick].numpy()
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    lab = labels.numpy()[pick]
    sim = e @ e.T
    iu = np.triu_indices(len(pick), k=1)
    same = lab[iu[0]] == lab[iu[1]]
    return sim[iu][same], sim[iu][~same]


def rows(params: Params, lookup: Lookup) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from dmllab.results import tidy

    planned = runs(params)
    out = lookup.rows(planned)
    hist = []
    bins = np.linspace(-1, 1, params["bins"] + 1)
    for run in planned:
        if run.tag.get("dim") != params["histogram_dim"]:
            continue
        for split in ("trainval", run.config.data.test_split):
            emb, labels, _ = lookup.embed(run, split)
            pos, neg = cosine_pairs(emb, labels, params["pairs_samples"], run.seed)
            side = "train" if split == "trainval" else "test"
            out += tidy(
                {f"{side}_cos_gap": float(pos.mean() - neg.mean())}, percent=False, **run.labels, **run.tag
            )
            if run.seed == params.seeds[0]:
                for kind, values in (("positive", pos), ("negative", neg)):
                    counts, _ = np.histogram(values, bins=bins)
                    hist += [
                        {
                            "variant": run.variant,
                            "split": side,
                            "pair": kind,
                            "bin_left": bins[i],
                            "bin_right": bins[i + 1],
                            "count": int(c),
                        }
                        for i, c in enumerate(counts)
                    ]
    return out, {"cosine_hist": pd.DataFrame(hist)}


def reference(rec: Any) -> tuple[str, str, str, str] | None:
    if rec["metric"] != "R@1" or pd.isna(rec.get("param_dim")):
        return None
    dim = int(rec["param_dim"])
    paper_dim = PAPER_DIM.get(dim) if rec["dataset"] in ("synthetic", "digits") else dim
    if paper_dim is None:
        return None
    column = {SM: "MODEL SM", HBN: HBN}.get(rec["variant"], f"MODEL {rec['variant']}")
    return "Table 3", str(paper_dim), column, "cars"


# On the benchmark only the profile's default size (smoke 16, quick 128) faces a paper column (the default 64);
# the paper profile's sizes face their own columns.
PAPER_DIM = {16: 64, 128: 64}


def _hbn_beats(df: pd.DataFrame, other: str) -> pd.DataFrame:
    """Per seed: HBN's R@1 minus ``other``'s, one member per embedding size both have."""
    dims = sorted(df.loc[df["variant"] == HBN, "param_dim"].dropna().unique())
    diffs = {
        f"{int(float(d))}-d": paired(df, "R@1", {"variant": HBN, "dim": d}, {"variant": other, "dim": d})
        for d in dims
    }
    return members({k: v for k, v in diffs.items() if len(v)})


def _mid_alpha(df: pd.DataFrame) -> pd.DataFrame:
    """Per seed: R@1 at alpha 16 minus at the smallest and minus at the largest alpha swept (two members)."""
    alphas = sorted(df["param_alpha"].dropna().unique())
    if len(alphas) < 3 or 16.0 not in alphas:
        return pd.DataFrame()
    return members(
        {
            f"16 vs {a:g}": paired(df, "R@1", {"alpha": 16.0}, {"alpha": float(a)})
            for a in (alphas[0], alphas[-1])
        }
    )


def _t3(better: str, worse: str, dim: str = "64") -> object:
    """Table 3's cells at ``dim`` (the quick rows at the preset's size face the paper's 64-d)."""
    return printed(cell(dim, better, label="Table 3"), cell(dim, worse, label="Table 3"))


def _dims(profile: str) -> str:
    p = ARTIFACTS[0].parameters[profile]
    return f"HBN at {', '.join(map(str, p['dims']))}-d, BN alpha 16 at {', '.join(map(str, p['alpha_dims']))}-d (paper: 64/128/256-d)"


def _alphas(profile: str) -> str:
    p = ARTIFACTS[0].parameters[profile]
    return (
        f"alpha {', '.join(f'{a:g}' for a in p['alphas'])} at {', '.join(map(str, p['alpha_dims']))}-d "
        "(paper: 4-64 at 64/128/256-d)"
    )


def _figure_table(tables: Any) -> Any:
    import matplotlib.pyplot as plt

    data = tables["rows"][tables["rows"]["metric"] == "R@1"]
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    for v, part in data.groupby("variant", sort=False):
        s = part.groupby("param_dim")["value"].agg(["mean", "std"]).sort_index()
        ax.errorbar(s.index.astype(float), s["mean"], yerr=s["std"].fillna(0), marker="o", capsize=3, label=v)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="embedding size", ylabel="R@1 (%)", title="SM, BN at several alpha, HBN")
    ax.legend(fontsize=8)
    return fig


def _figure_hist(tables: Any) -> Any:
    import matplotlib.pyplot as plt

    h = tables["cosine_hist"]
    variants = list(dict.fromkeys(h["variant"]))
    fig, axes = plt.subplots(2, len(variants), figsize=(2.6 * len(variants), 4.8), squeeze=False, sharex=True)
    for j, v in enumerate(variants):
        for i, side in enumerate(("train", "test")):
            ax = axes[i][j]
            for kind, colour in (("positive", "tab:green"), ("negative", "tab:red")):
                part = h[(h["variant"] == v) & (h["split"] == side) & (h["pair"] == kind)]
                total = max(part["count"].sum(), 1)
                edges = np.r_[part["bin_left"].to_numpy(), part["bin_right"].iloc[-1:]]
                ax.stairs(part["count"] / total, edges, color=colour, fill=True, alpha=0.5, label=kind)
            ax.set_title(f"{v} ({side})", fontsize=8)
            ax.set_xlabel("cosine similarity" if i == 1 else "")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


ARTIFACTS = (
    Artifact(
        id="heated_table3_fig4_alpha_dim",
        paper="heated",
        label="Table 3, Fig. 4",
        tier="ablation",
        title="alpha x embedding size (SM, BN, HBN) and cosine-similarity histograms",
        description=(
            "Heated-up Softmax Table 3 (Cars R@1): SM, BN with alpha in {4, 8, 16, 32, 64} and HBN (16 -> 4) at "
            "64, 128 and 256 dimensions; Fig. 4: histograms of the cosine similarity of positive and negative "
            "pairs (train and test) for SM, BN at several alpha and HBN. dmllab: the `heated_softmax` preset per "
            "variant with alpha and the embedding size changed. Quick: alpha {4, 16, 64} at 128-d (the preset's "
            "size; BN 16 and HBN are the Table 1 runs) and SM/HBN at 32-d as well; histograms at 128-d over all "
            "pairs of 400 random samples (first seed), extra table `cosine_hist`; the rows add the per-seed gap "
            "between the mean positive and mean negative similarity. Quick rows at the preset's 128-d face the "
            "paper's default 64-d Cars cells; the 32-d rows face none."
        ),
        parameters={
            "smoke": {
                "dataset": "cars",
                "dims": [16],
                "alpha_dims": [16],
                "alphas": [4.0, 16.0],
                "histogram_dim": 16,
                "pairs_samples": 60,
                "bins": 20,
            },
            "quick": {
                "dataset": "cars",
                "dims": [32, 128],
                "alpha_dims": [128],
                "alphas": [4.0, 16.0, 64.0],
                "histogram_dim": 128,
                "pairs_samples": 400,
                "bins": 40,
            },
            "paper": {
                "seeds": [0, 1, 2],
                "dataset": "cars",
                "dims": [64, 128, 256],
                "alpha_dims": [64, 128, 256],
                "alphas": [4.0, 8.0, 16.0, 32.0, 64.0],
                "histogram_dim": 64,
                "pairs_samples": 1000,
                "bins": 50,
            },
        },
        parameter_help={
            "dataset": "paper dataset (Cars; the offline benchmark on smoke/quick)",
            "dims": "embedding sizes (SM and HBN at each)",
            "alpha_dims": "sizes at which BN's alpha is swept",
            "alphas": "BN's alpha",
            "histogram_dim": "size whose runs give the Fig. 4 histograms",
            "pairs_samples": "samples whose pairs are histogrammed",
            "bins": "histogram bins on [-1, 1]",
        },
        runs=runs,
        rows=rows,
        tables=("cosine_hist",),
        reference=reference,
        claims=(
            Claim(
                "HBN beats SM at every embedding size",
                lambda df: _hbn_beats(df, SM),
                unit="R@1 points",
                differs=differs(_dims, variant="HBN", heated=True),
                arms=(BN,),
                worse_arms=(SM_LABEL,),
                paper_effect=Smallest(tuple(_t3(HBN, "MODEL SM", d) for d in ("64", "128", "256"))),
                primary=True,
                key="hbn_sm",
            ),
            Claim(
                "HBN (16 -> 4) beats BN alpha = 16 at every size both train (heating helps)",
                lambda df: _hbn_beats(df, bn(16.0)),
                unit="R@1 points",
                differs=differs(_dims, variant="HBN", heated=True),
                arms=(BN,),
                paper_effect=Smallest(tuple(_t3(HBN, "MODEL α = 16", d) for d in ("64", "128", "256"))),
                key="hbn_bn",
            ),
            Claim(
                "a middle alpha (16) beats both extremes of the alpha range (each on its own)",
                _mid_alpha,
                unit="R@1 points",
                differs=differs(_alphas),
                arms=(BN,),
                paper_effect=Smallest(
                    (_t3("MODEL α = 16", "MODEL α = 4"), _t3("MODEL α = 16", "MODEL α = 64"))
                ),
                key="mid_alpha",
            ),
            Claim(
                "Fig. 4: HBN separates positive and negative test pairs more than SM (mean cosine gap)",
                lambda df: paired(df, "test_cos_gap", {"variant": HBN}, {"variant": SM}),
                unit="cosine",
                differs=differs(
                    lambda p: (
                        f"the gap of mean positive and negative cosine over the pairs of "
                        f"{ARTIFACTS[0].parameters[p]['pairs_samples']} random test images quantifies the histograms"
                    ),
                    variant="HBN",
                    heated=True,
                ),
                arms=(BN,),
                worse_arms=(SM_LABEL,),
                key="cos_gap",
            ),
        ),
        figures=(
            Figure(_figure_table, caption="R@1 against embedding size per variant (mean, std)."),
            Figure(
                _figure_hist, suffix="_hist", caption="Fig. 4: cosine similarity of positive/negative pairs."
            ),
        ),
    ),
)
