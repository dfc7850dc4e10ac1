"""Heated-up Softmax Tables 6 and 7: which normalisation matters (SM, SM + alpha, BN w/o WN, BN), and the final
training accuracy against alpha."""

from __future__ import annotations

from typing import Any

import pandas as pd

from dmllab.experiments import kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run, printed
from dmllab.experiments.compare import averaged, paired
from dmllab.experiments.heated._common import BN, SM, cell, differs, hs_config, split_accuracy
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params

PRINTED_ALPHAS = (2.0, 4.0, 8.0, 16.0, 32.0)  # Table 7's columns
SETTINGS = {  # variant -> (preset variant, extra loss kwargs, extra overrides)
    "SM+ α": ("BN", {"normalize_weights": False}, {"model.norm": "none"}),
    "BN w/o WN": ("BN", {"normalize_weights": False}, {}),
    "BN": ("BN", {}, {}),
}


def runs(params: Params) -> list[Run]:
    ds, out = params["dataset"], []
    out += kit.seeds_runs(hs_config(params.profile, ds, "SM"), params, "SM", table="6")
    for name in ("SM+ α", "BN w/o WN", "BN"):
        preset, kw, over = SETTINGS[name]
        for a in params["table6_alphas"]:
            cfg = hs_config(params.profile, ds, preset, alpha=a, loss_kwargs=kw or None, overrides=over)
            out += kit.seeds_runs(cfg, params, name, alpha=float(a), table="6")
    for a in params["table7_alphas"]:
        if a in params["table6_alphas"]:
            continue  # the Table 6 BN run of that alpha
        cfg = hs_config(params.profile, ds, "BN", alpha=a)
        out += kit.seeds_runs(cfg, params, "BN", alpha=float(a), table="7")
    return out


def rows(params: Params, lookup: Lookup) -> list[dict[str, Any]]:
    from dmllab.results import tidy

    planned = runs(params)
    # SM + alpha (unnormalised features and weights under a large scale) can diverge: such runs give `diverged` rows
    out = lookup.rows(planned)
    train = planned[0].config.data.train_split
    for run in planned:
        if run.variant == "BN" and run.tag.get("alpha") in params["table7_alphas"]:
            acc, kind = split_accuracy(lookup, run, train, train)
            out += tidy(
                {"train_accuracy": 100.0 * acc}, percent=False, **run.labels, classifier=kind, **run.tag
            )
    return out


def reference(rec: Any) -> tuple[str, str, str, str] | None:
    metric, variant, alpha = str(rec["metric"]), str(rec["variant"]), rec.get("param_alpha")
    if metric == "train_accuracy":
        if variant != "BN" or alpha is None or pd.isna(alpha) or float(alpha) not in PRINTED_ALPHAS:
            return None
        return "Table 7", "TRAIN ACC", f"α = {float(alpha):g}", "cars"
    if metric not in ("R@1", "NMI") or str(rec.get("param_table")) != "6":
        return None
    column = "SM" if variant == "SM" else f"{variant} α = {float(alpha):g}"
    return "Table 6", metric, column, "cars"


def _vs(df: pd.DataFrame, better: str, worse: str) -> pd.Series:
    """Per seed: R@1 of ``better`` minus ``worse`` at the same alpha, averaged over Table 6's alphas (the Table 7
    runs of other alphas excluded); SM, which has no alpha, faces each alpha."""
    t6 = df[df["param_table"].astype(str) == "6"]
    alphas = sorted(a for a in t6["param_alpha"].dropna().unique())
    diffs = []
    for a in alphas:
        b = {"variant": better} if better == "SM" else {"variant": better, "alpha": float(a)}
        w = {"variant": worse} if worse == "SM" else {"variant": worse, "alpha": float(a)}
        diffs.append(paired(t6, "R@1", b, w))
    return averaged(diffs)


def _table6(profile: str) -> str:
    alphas = ", ".join(f"{a:g}" for a in ARTIFACT.parameters[profile]["table6_alphas"])
    return f"alpha {alphas}, like for like (paper: 8, 16, 32)"


def _table7(profile: str) -> str:
    alphas = ", ".join(f"{a:g}" for a in ARTIFACT.parameters[profile]["table7_alphas"])
    return (
        f"BN alpha {alphas} (paper: 2-32); accuracy of the trained classifier on the training images with the "
        "test transform"
    )


def _train_acc_grows(df: pd.DataFrame) -> pd.Series:
    sel = df[df["metric"] == "train_accuracy"]
    alphas = sorted(sel["param_alpha"].dropna().unique())
    if len(alphas) < 2:
        return pd.Series(dtype=float)
    return paired(sel, "train_accuracy", {"alpha": alphas[-1]}, {"alpha": alphas[0]})


PARAMETERS = {
    "smoke": {"dataset": "cars", "table6_alphas": [16.0], "table7_alphas": [4.0, 16.0]},
    "quick": {"dataset": "cars", "table6_alphas": [16.0], "table7_alphas": list(PRINTED_ALPHAS)},
    "paper": {
        "seeds": [0, 1, 2],
        "dataset": "cars",
        "table6_alphas": [8.0, 16.0, 32.0],
        "table7_alphas": list(PRINTED_ALPHAS),
    },
}


def _t6(better: str, worse: str) -> dict[str, object]:
    """Table 6's R@1 of ``better`` minus ``worse``, each averaged over the profile's Table 6 alphas."""

    def side(variant: str, profile: str) -> list[tuple[str, str, str, str]]:
        if variant == "SM":
            return [cell("R@1", "SM", label="Table 6")]
        return [
            cell("R@1", f"{variant} α = {a:g}", label="Table 6") for a in PARAMETERS[profile]["table6_alphas"]
        ]

    return {p: printed(side(better, p), side(worse, p)) for p in PARAMETERS}


def _t6_claim(text: str, better: str, worse: str, key: str, **kw: Any) -> Claim:
    """A Table 6 claim: ``better`` beats ``worse`` on R@1 at the same alpha (:func:`_vs`, :func:`_t6`)."""
    return Claim(
        text,
        lambda df: _vs(df, better, worse),
        unit="R@1 points",
        differs=differs(_table6),
        paper_effect=_t6(better, worse),
        key=key,
        **{"arms": (BN,), **kw},
    )


def _t7() -> dict[str, object]:
    """Table 7's training accuracy at the largest minus at the smallest alpha the profile trains."""

    def at(a: float) -> tuple[str, str, str, str]:
        return cell("TRAIN ACC", f"α = {a:g}", label="Table 7")

    out: dict[str, object] = {}
    for p, values in PARAMETERS.items():
        printed_ = [a for a in values["table7_alphas"] if a in PRINTED_ALPHAS]
        out[p] = printed(at(max(printed_)), at(min(printed_))) if len(printed_) > 1 else None
    return out


def _figure(tables: Any) -> Any:
    import matplotlib.pyplot as plt
    import seaborn as sns

    rows = tables["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    t6 = rows[rows["metric"].isin(["R@1", "NMI"]) & (rows["param_table"].astype(str) == "6")]
    sns.barplot(data=t6, x="variant", y="value", hue="metric", errorbar="sd", ax=axes[0])
    axes[0].set(title="Table 6: normalisation", xlabel="", ylabel="%")
    t7 = rows[rows["metric"] == "train_accuracy"]
    s = t7.groupby("param_alpha")["value"].agg(["mean", "std"]).sort_index()
    axes[1].errorbar(s.index.astype(float), s["mean"], yerr=s["std"].fillna(0), marker="o", capsize=3)
    axes[1].set_xscale("log", base=2)
    axes[1].set(xlabel="alpha (BN)", ylabel="final training accuracy (%)")
    axes[1].set_title("Table 7: training accuracy against alpha")
    fig.tight_layout()
    return fig


ARTIFACT = Artifact(
    id="heated_table6_7_norms",
    paper="heated",
    label="Tables 6, 7",
    tier="ablation",
    title="Normalisation (SM, SM + alpha, BN w/o WN, BN) and training accuracy against alpha",
    description=(
        "Heated-up Softmax Table 6 (Cars NMI, R@1): plain softmax (SM), softmax with a scale alpha on "
        "unnormalised features and weights (SM + alpha), BN features without weight normalisation (BN w/o WN) "
        "and BN (both normalised), at alpha 8, 16, 32: feature normalisation matters most, weight normalisation "
        "adds a little. Table 7: the final training accuracy of BN rises with alpha (88.7% at 2 to 99.6% at 32): "
        "a small alpha cannot fit the training set. dmllab: the `heated_softmax` BN preset with "
        "`normalize_weights=False` (and `model.norm=none` for SM + alpha); training accuracy of the trained "
        "softmax classifier on the training images (test transform) where the run saves the loss state, else of "
        "the nearest class mean (`param_classifier`). Quick: alpha 16 for Table 6, BN alpha {4, 16, 64} for "
        "Table 7 (the Table 3 runs). Table 6's claims compare the settings at the same alpha (mean over Table "
        "6's alphas; BN's Table 7 runs at other alphas are not in them). SM + alpha (unnormalised features and "
        "weights under a large scale) can diverge; the run store records such a run as diverged, its rows are "
        "`diverged`, and the claims that need it cannot decide."
    ),
    parameters=PARAMETERS,
    parameter_help={
        "dataset": "paper dataset (Cars; the offline benchmark on smoke/quick)",
        "table6_alphas": "alphas of Table 6",
        "table7_alphas": "BN alphas of Table 7",
    },
    runs=runs,
    rows=rows,
    reference=reference,
    claims=(
        _t6_claim(
            "SM + alpha beats SM (R@1, mean over Table 6's alphas)",
            "SM+ α",
            "SM",
            "sm_alpha_vs_sm",
            arms=(SM, BN),
        ),
        _t6_claim(
            "BN w/o WN beats SM + alpha at the same alpha: feature normalisation matters",
            "BN w/o WN",
            "SM+ α",
            "bn_wown_vs_sm_alpha",
            primary=True,
        ),
        _t6_claim(
            "BN beats BN w/o WN at the same alpha: weight normalisation helps",
            "BN",
            "BN w/o WN",
            "bn_vs_bn_wown",
        ),
        Claim(
            "Table 7: training accuracy rises with alpha (largest minus smallest)",
            _train_acc_grows,
            unit="accuracy points",
            differs=differs(_table7),
            arms=(BN,),
            paper_effect=_t7(),
            key="train_acc",
        ),
    ),
    figures=(
        Figure(_figure, caption="Table 6 bars (mean, std) and Table 7 training accuracy against alpha."),
    ),
)
