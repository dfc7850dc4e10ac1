"""Proxy Synthesis Fig. 5 (+ Table B): R@1 of embedding deformations over lambda (stored NS / PN models)."""

from __future__ import annotations

from typing import Any

from dmllab.experiments.artifact import Artifact, Claim, Figure, Run, printed
from dmllab.experiments.compare import paired
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params
from dmllab.experiments.proxy_synthesis import _common as C

SHORT = {"normsoftmax": ("(a)", "NS"), "proxynca": ("(b)", "PN")}


def runs(params: Params) -> list[Run]:
    """The Table 6 Norm-softmax and Proxy-NCA runs with and without PS (no training of its own)."""
    return C.loss_runs(params, params["bases"], C.datasets(params.profile, params["datasets"]))


def rows(params: Params, lookup: Lookup) -> list[dict[str, Any]]:
    from dmllab.metrics.deform import embedding_deformation_recall
    from dmllab.results import tidy

    out = []
    for run in map(lookup.place, runs(params)):
        for split_name, split in (
            ("Train", run.config.data.trainval_split),
            ("Test", run.config.data.test_split),
        ):
            emb, labels, _ = lookup.embed(run, split)
            res = embedding_deformation_recall(
                emb,
                labels,
                params["lambdas"],
                num_pairs=params["num_pairs"],
                per_pair=params["per_pair"],
                distance=run.config.run.distance,
                seed=run.seed,
            )
            for lam, m in res.items():
                out += tidy(
                    m,
                    **run.labels,
                    lam=round(lam, 4),
                    split=split_name,
                    base=run.tag["base"],
                    draw=run.draw,
                    run_id=run.key,
                )
    return out


def reference(rec: Any) -> tuple[str, ...] | None:
    if rec["metric"] != "R@1":
        return None
    try:
        base, ps = C.base_of(str(rec["variant"]))
    except KeyError:
        return None
    if base not in SHORT:
        return None
    part, short = SHORT[base]
    column = f"{rec['param_split']} {'PS + ' if ps else ''}{short}"
    return ("Table B", f"{part} λ = {float(rec['param_lam']):.2f}", column, C.stand_in(rec))


def _gain(base: str, split: str):
    def effect(df: Any) -> Any:
        d = df[df["param_split"] == split]
        return paired(d, "R@1", {"variant": C.label(base, True)}, {"variant": C.label(base, False)})

    return effect


def _lambdas(profile: str) -> str:
    lams = ARTIFACT.parameters[profile]["lambdas"]
    return f"lambda {min(lams):g}-{max(lams):g} ({len(lams)} values; paper: 0.10-0.95 in steps of 0.05)"


LAMBDAS = {
    "smoke": [0.2, 0.5],
    "quick": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
    "paper": [round(0.1 + 0.05 * i, 2) for i in range(18)],
}


def _tb(base: str, split: str) -> dict[str, Any]:
    """Table B's R@1 with PS minus without on ``split``, averaged over the profile's lambdas."""
    part, short = SHORT[base]

    def side(ps: bool, lams: list[float]) -> list[tuple[str, str, str, str]]:
        column = f"{split} {'PS + ' if ps else ''}{short}"
        return [C.cell("Table B", f"{part} λ = {lam:.2f}", column) for lam in lams]

    return {p: printed(side(True, lams), side(False, lams)) for p, lams in LAMBDAS.items()}


def _plot(tables: Any) -> Any:
    import matplotlib.pyplot as plt

    df = tables["rows"]
    df = df[df["metric"] == "R@1"].copy()
    df["lam"] = df["param_lam"].astype(float)
    splits = [s for s in ("Train", "Test") if s in set(df["param_split"])]
    fig, axes = plt.subplots(1, len(splits), figsize=(5 * len(splits), 3.8), squeeze=False, sharey=True)
    for ax, split in zip(axes[0], splits):
        for variant, g in df[df["param_split"] == split].groupby("variant"):
            s = g.groupby("lam")["value"].agg(["mean", "std"]).reset_index()
            style = dict(marker="o", ms=3, capsize=2, linestyle="--" if not variant.startswith("PS") else "-")
            ax.errorbar(s["lam"], s["mean"], yerr=s["std"].fillna(0), label=variant, **style)
        ax.set(xlabel="lambda of the synthetic embeddings", title=f"{split} set")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("R@1 (%), mean +- std over seeds")
    fig.suptitle("PS Fig. 5 / Table B: embedding deformation")
    fig.tight_layout()
    return fig


def _claim(text: str) -> Claim:
    """PS's R@1 gain under deformation for the base and on the split ``text`` names (Table B), averaged over the
    lambdas; Norm-softmax's test-set claim is the primary one."""
    base = "proxynca" if "Proxy-NCA" in text else "normsoftmax"
    split = "Test" if "test set" in text else "Train"
    return Claim(
        text,
        _gain(base, split),
        unit="R@1 points",
        differs=C.differs(_lambdas, base),
        arms=(C.arm(base),),
        paper_effect=_tb(base, split),
        primary=(base, split) == ("normsoftmax", "Test"),
        training_fit=True,
        key=f"{'pnca' if base == 'proxynca' else 'ns'}_{split.lower()}",
    )


ARTIFACT = Artifact(
    id="ps_fig5_embedding_deformation",
    paper="proxy_synthesis",
    label="Fig. 5",
    title="Robustness to embedding deformation over lambda (+ Table B: Norm-softmax and Proxy-NCA)",
    description=(
        "PS Fig. 5 / Table B (CARS196): synthetic embeddings lambda x_a + (1 - lambda) x_b of two classes are the "
        "queries; the gallery holds other synthetics of the same pairs plus all original embeddings; R@1 over "
        "lambda, on the train and the test split, for Norm-softmax (a) and Proxy-NCA (b) with and without PS "
        "(`dmllab.metrics.deform.embedding_deformation_recall`, same class pairs and samples for every lambda). "
        "No training of its own: the stored Table 6 runs are reloaded. Quick: the offline benchmark (rows face "
        "the Cars column), lambda 0.1-0.9 in steps of 0.1 (the paper: 0.10-0.95 in 0.05)."
    ),
    parameters={
        "smoke": {
            "bases": ["normsoftmax"],
            "lambdas": LAMBDAS["smoke"],
            "num_pairs": 10,
            "per_pair": 3,
            "datasets": ["synthetic"],
        },
        "quick": {
            "bases": ["normsoftmax", "proxynca"],
            "lambdas": LAMBDAS["quick"],
            "num_pairs": 100,
            "per_pair": 5,
            "datasets": ["synthetic"],
        },
        "paper": {
            "seeds": [0, 1, 2],
            "bases": ["normsoftmax", "proxynca"],
            "lambdas": LAMBDAS["paper"],
            "num_pairs": 100,
            "per_pair": 5,
            "datasets": ["cars"],
        },
    },
    parameter_help={
        "bases": "losses (each with and without PS)",
        "lambdas": "interpolation coefficients",
        "num_pairs": "random class pairs (synthetic classes)",
        "per_pair": "query and gallery synthetics per pair",
        "datasets": "paper-profile datasets",
    },
    runs=runs,
    rows=rows,
    reference=reference,
    claims=(
        _claim(
            "PS + Norm-softmax is more robust to embedding deformation on the test set (mean over lambda)"
        ),
        _claim(
            "PS + Norm-softmax is more robust to embedding deformation on the train set (mean over lambda)"
        ),
        _claim("PS + Proxy-NCA is more robust on the test set (Table Bb)"),
        _claim("PS + Proxy-NCA is more robust on the train set (Table Bb)"),
    ),
    figures=(Figure(_plot, caption="R@1 of synthetic queries over lambda (mean +- std over seeds)."),),
)
