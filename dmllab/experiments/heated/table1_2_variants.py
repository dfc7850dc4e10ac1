"""Heated-up Softmax Tables 1 and 2: SM, LN, BN, HLN, HBN (NMI and R@K)."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import figures, kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run, printed
from dmllab.experiments.compare import paired
from dmllab.experiments.heated._common import BN, LN, SM, alpha_of, cell, differs, hs_config, table1_cell
from dmllab.experiments.params import Params

VARIANTS = ("SM", "LN", "BN", "HLN", "HBN")


def runs(params: Params) -> list[Run]:
    out: list[Run] = []
    for ds in params["datasets"]:
        for v in params["variants"]:
            out += kit.seeds_runs(hs_config(params.profile, ds, v), params, v)
    return out


def _setup(variant: str, heated: bool) -> object:
    return lambda p: (
        f"H{variant} is the same {variant} run (alpha {alpha_of(p, variant, 'cub'):.3g}; paper: 16) plus heating"
        if heated
        else f"both unheated, {variant} at its preset's alpha {alpha_of(p, variant, 'cub'):.3g} (paper: 16)"
    )


def _claim(text: str, better: str, worse: str, key: str, metric: str = "R@1", primary: bool = False) -> Claim:
    """``better`` minus ``worse`` on ``metric``, paired on the seed, facing Table 1's CUB cells (the benchmark faces
    CUB); a heated variant (HLN, HBN) against its unheated run, an unheated one against SM."""
    heated = better.startswith("H")
    base = better[1:] if heated else better
    row = f"CUB200 DATASET {metric}"
    return Claim(
        text,
        lambda df: paired(df, metric, {"variant": better}, {"variant": worse}),
        unit=f"{metric} points",
        differs=differs(_setup(base, heated), "cub", better, heated=heated),
        arms=({"LN": LN, "BN": BN}[base],),
        worse_arms=() if heated else (SM,),
        paper_effect=printed(cell(row, better, "cub"), cell(row, worse, "cub")),
        primary=primary,
        key=key,
    )


def _figure(tables: Any, metric: str = "R@1") -> Any:
    return figures.bar_figure(
        tables, metric=metric, order=VARIANTS, title=f"Heated-up Softmax variants: {metric}"
    )


ARTIFACT = Artifact(
    id="heated_table1_2_variants",
    paper="heated",
    label="Tables 1, 2",
    tier="headline",
    title="SM, LN, BN, HLN, HBN: NMI and R@K",
    description=(
        "Heated-up Softmax Tables 1 (Cars, CUB, SOP: NMI, R@K) and 2 (In-Shop: R@K): plain softmax (SM), "
        "L2-normalised (LN) and BatchNorm-normalised (BN) features with a scaled normalised softmax (alpha 16), "
        "and their heated-up versions (HLN, HBN: LN, BN fine-tuned at alpha 16 -> 4 and lr x 0.1). On quick LN and "
        "BN train at the alpha `dmllab tune` chose on validation (the claims' 'differs' lines give it) and heat "
        "to a quarter of it. dmllab: the "
        "`heated_softmax` preset per variant (GoogLeNet 64-d, batch 32, 80 epochs on the paper profile, a fixed "
        "schedule on every training class, NMI on L2-normalised features); on the paper profile HLN/HBN heat "
        "inside one run as the authors' release does (heated from epoch 62 of 80, the last 19: where paper and "
        "code disagree the paper preset follows the code), on the quick profile they are fine-tunes of the "
        "converged quick LN/BN for 2 epochs (the paper text's procedure, an option on the paper profile). Quick: "
        "the offline benchmark (SmallCNN, 128-d, 8 epochs); the rows face the CUB cells."
    ),
    parameters={
        "smoke": {"datasets": ["cub"], "variants": ["SM", "BN", "HBN"]},
        "quick": {"datasets": ["cub"], "variants": list(VARIANTS)},
        "paper": {
            "seeds": [0, 1, 2],
            "datasets": ["cars", "cub", "sop", "inshop"],
            "variants": list(VARIANTS),
        },
    },
    parameter_help={
        "datasets": "paper datasets (the offline benchmark on smoke/quick)",
        "variants": "SM, LN, BN, HLN, HBN",
    },
    runs=runs,
    reference=table1_cell,
    claims=(
        _claim("LN beats SM (R@1)", "LN", "SM", "ln_sm"),
        _claim("BN beats SM (R@1)", "BN", "SM", "bn_sm", primary=True),
        _claim("heating up improves LN (HLN - LN, R@1)", "HLN", "LN", "hln_ln"),
        _claim("heating up improves BN (HBN - BN, R@1)", "HBN", "BN", "hbn_bn", primary=True),
        _claim("heating up improves BN's NMI (HBN - BN)", "HBN", "BN", "hbn_bn_nmi", "NMI"),
    ),
    figures=(
        Figure(
            _figure,
            caption="R@1 per variant (mean +- std over seeds, seeds as points); diamonds: the paper's (on quick "
            "its differences to SM, drawn from the reproduced SM).",
        ),
        Figure(lambda t: _figure(t, "NMI"), suffix="_nmi", caption="NMI per variant, as R@1's figure."),
    ),
    not_reproduced={"literature columns [1]-[8]": "other methods' published numbers, not retrained"},
)
