"""ProxyNCA++ Fig. 4b: R@1 against k of global k-max pooling (Eq. 7), from k = 1 (GMP) to k = H x W (GAP)."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import analogue
from dmllab.experiments.artifact import Artifact, Claim, Run, printed
from dmllab.experiments.compare import extremes
from dmllab.experiments.params import Params
from dmllab.experiments.pnpp import _common as C


def build(dataset: str, profile: str, k: int, map_size: int) -> Any:
    """k = 1 is global max pooling and k = H x W global average pooling (Eq. 7's end points): those two are
    built as the presets' max / avg pooling, so they share the ProxyNCA++ and -max runs of the other tables."""
    if k == 1:
        return C.pnpp(dataset, profile)
    if k >= map_size:
        return C.pnpp(dataset, profile, max=False)
    return C.pnpp(dataset, profile, pooling="kmax", k=int(k))


def runs(params: Params) -> list[Run]:
    m = params["map_size"]
    return C.sweep_runs(params, lambda d, p, k: build(d, p, int(k), m), "k", [int(k) for k in params["ks"]])


def _correlation(df: Any) -> Any:
    """Per seed: minus the Pearson correlation of k and R@1 (the paper: -0.98, so the effect is about 0.98)."""
    import pandas as pd

    sel = df[df["metric"] == "R@1"].copy()
    sel["k"] = pd.to_numeric(sel["param_k"])
    return (
        sel.groupby("seed")
        .apply(
            lambda g: -g["k"].corr(g["value"]) if g["k"].nunique() > 2 else float("nan"), include_groups=False
        )
        .dropna()
    )


_FIGURE = C.sweep_figure(
    "k",
    "k of global k-max pooling (log; 1 = GMP, H x W = GAP)",
    "Fig. 4b: ProxyNCA++ R@1 against k",
    "k",
    preset=False,
)

ARTIFACT = Artifact(
    id="pnpp_fig4b_kmax",
    paper="pnpp",
    label="Fig. 4b",
    title="R@1 against k of global k-max pooling",
    description=(
        "ProxyNCA++ Fig. 4b: global k-max pooling (Eq. 7: the mean of each channel's k largest activations) "
        "interpolates between GMP (k = 1) and GAP (k = M^2); on CUB R@1 falls as k grows (correlation -0.98). "
        "ResNet-50 with 256 crops has an 8 x 8 final map (k up to 64). The quick profile's SmallCNN on 56-pixel "
        "crops has a 7 x 7 map (k up to 49); k = 1 and k = 49 are the ProxyNCA++ and -max runs (Tables 3-6, "
        "7-10 and 12-13), the other k use `pooling='kmax'`. Quick: k = 1, 2, 8, 49 (four points, to keep the "
        "quick budget)."
    ),
    parameters={
        "smoke": {"datasets": ["synthetic"], "ks": [1, 4, 16], "map_size": 16},
        "quick": {"datasets": ["synthetic"], "ks": [1, 2, 8, 49], "map_size": 49},
        "paper": {"datasets": ["cub"], "ks": [1, 2, 4, 8, 16, 32, 64], "map_size": 64},
    },
    parameter_help={
        "datasets": "datasets to train on",
        "ks": "the swept k",
        "map_size": "H x W of the final feature map (k at map_size is GAP)",
    },
    runs=runs,
    claims=(
        Claim(
            "a lower k is better: R@1 at k = 1 (GMP) above k = H x W (GAP)",
            lambda df: extremes(df, "R@1", "k", low_minus_high=True),
            unit="R@1 points",
            differs=analogue.differs(
                lambda p: (
                    f"k = H x W is {ARTIFACT.parameters[p]['map_size']} on the SmallCNN's map (paper: 64)"
                ),
                "proxynca++",
            ),
            arms=("proxynca++",),
            paper_effect=printed(C.cell("Table 7", "ProxyNCA++ (Emb: 2048)"), C.cell("Table 7", "-max")),
            key="gmp_vs_gap",
        ),
        Claim(
            "k and R@1 are negatively correlated (per seed, minus Pearson r)",
            _correlation,
            unit="-r",
            differs=analogue.differs(
                lambda p: (
                    f"k = {', '.join(map(str, ARTIFACT.parameters[p]['ks']))} (paper: a curve over 1..64, "
                    "r = -0.98)"
                ),
                "proxynca++",
            ),
            arms=("proxynca++",),
            paper_effect=0.98,  # the text of Sec. 3.5: "a correlation of -0.98"
            primary=True,
            key="k_correlation",
        ),
    ),
    figures=(_FIGURE,),
)
