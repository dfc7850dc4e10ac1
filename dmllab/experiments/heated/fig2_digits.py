"""Heated-up Softmax Fig. 2: 2-D bottleneck embeddings, softmax vs normalised features with alpha = 4."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import analogue
from dmllab.experiments.arrays import frame_to_arrays
from dmllab.experiments.artifact import Artifact, Claim, Figure
from dmllab.experiments.compare import paired
from dmllab.experiments.kit import over_seeds
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params

_COMMON = {"alpha": 4.0, "hidden": [256, 128], "lr": 0.001}
LN, SM = {"variant": "LN alpha=4"}, {"variant": "SM"}
_TOY = analogue.differs(
    "a toy: the bundled 8x8 digits and an MLP with a 2-D bottleneck (paper: MNIST, LeNet)"
)


def rows(params: Params, lookup: Lookup) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from dmllab.toys import heated

    return over_seeds(
        heated.run_heated_embeddings,
        params.seeds,
        "embeddings",
        alpha=params["alpha"],
        hidden=params["hidden"],
        steps=params["steps"],
        lr=params["lr"],
    )


def _figure(tables: Any) -> Any:
    from dmllab.plots import toys as toy_plots

    data = frame_to_arrays(tables["embeddings"])
    for d in data.values():
        d["labels"] = d["labels"].astype(int)
    return toy_plots.plot_heated_embeddings(data, tables["rows"])


ARTIFACT = Artifact(
    id="heated_fig2_digits",
    paper="heated",
    label="Fig. 2",
    title="2-D bottleneck embeddings: off-the-shelf softmax vs normalised features with alpha = 4",
    description=(
        "Heated-up Softmax Fig. 2 analogue: the paper trains LeNet on MNIST with a 2-D bottleneck; here the "
        "bundled 8x8 digits stand in for MNIST, with an MLP 64 -> 256 -> 128 -> 2. (a) SM: unnormalised "
        "features and weights, alpha = 1 (SoftmaxLoss); (b) the same embedding L2-normalised; (c) L2-"
        "normalised features and weights with alpha = 4 (HeatedSoftmaxLoss). Diamonds: classifier weights. "
        "Numbers on the test digits: classifier accuracy, R@1 on the L2-normalised embeddings (as the paper "
        "evaluates), the intra-class angle (to the class mean direction), the mean angle between class "
        "mean directions, their ratio, and the coefficient of variation of the raw feature norms."
    ),
    parameters={
        "smoke": {"steps": 20, **_COMMON},
        "quick": {"steps": 500, **_COMMON},
        "paper": {"seeds": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "steps": 2000, **_COMMON},
    },
    parameter_help={
        "steps": "full-batch Adam steps",
        "alpha": "alpha of the normalised model",
        "hidden": "MLP widths",
        "lr": "Adam learning rate",
    },
    rows=rows,
    tables=("embeddings",),
    claims=(
        Claim(
            "Fig. 2: normalised training with alpha = 4 gives more compact classes than SM, even with SM's "
            "features L2-normalised (lower intra/inter class angle ratio)",
            lambda df: paired(df, "intra_inter_ratio", SM, LN),
            unit="ratio",
            differs=_TOY,
            key="compact",
        ),
        Claim(
            "Tables 1-2: the normalised model retrieves better than SM (R@1)",
            lambda df: paired(df, "R@1", LN, SM),
            unit="R@1 points",
            differs=_TOY,
            primary=True,
            key="retrieval",
        ),
        Claim(
            "Sec. 3.3: trained with normalisation, the features' norms before normalisation are similar "
            "(lower norm coefficient of variation than SM)",
            lambda df: paired(df, "norm_cv", SM, LN),
            unit="CV",
            differs=_TOY,
            key="norm_cv",
        ),
    ),
    figures=(Figure(_figure, caption="(a) SM, (b) SM normalised, (c) LN alpha = 4 (first seed)."),),
)
