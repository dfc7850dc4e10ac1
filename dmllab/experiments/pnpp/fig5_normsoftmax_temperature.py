"""ProxyNCA++ Fig. 5 (appendix A): R@1 of NormSoftMax against its temperature."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import analogue, figures, kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run
from dmllab.experiments.params import Params
from dmllab.experiments.pnpp import _common as C

BEST = 1 / 2


def runs(params: Params) -> list[Run]:
    return C.sweep_runs(
        params,
        lambda d, p, t: kit.config("normsoftmax", d, p, temperature=t),
        "temperature",
        params["temperatures"],
    )


def _lowest(df: Any) -> Any:
    import pandas as pd

    return C.diff_at(df, "R@1", "temperature", BEST, float(pd.to_numeric(df.get("param_temperature")).min()))


def _figure(tables: Any) -> Any:
    return figures.sweep_figure(
        tables,
        "temperature",
        xlabel="temperature T (log)",
        mark=BEST,
        title="Fig. 5: NormSoftMax R@1 against T (dotted: T = 1/2)",
    )


ARTIFACT = Artifact(
    id="pnpp_fig5_normsoftmax_temperature",
    paper="pnpp",
    label="Fig. 5",
    title="R@1 of NormSoftMax against the temperature T",
    description=(
        "ProxyNCA++ appendix A, Fig. 5: NormSoftMax (no layer norm, no class-balanced batches, no fast proxies) "
        "on CUB against T; the authors pick T = 1/2 from it. The swept values are not printed: dmllab sweeps "
        "factors of 2 around 1/2. T = 1/2 is the NormSoftMax preset (shared with pnpp_table12_13_normsoftmax). "
        "Quick: the offline benchmark, 3 seeds."
    ),
    parameters={
        "smoke": {"seeds": [0, 1], "datasets": ["synthetic"], "temperatures": [1.0, 0.5]},
        "quick": {"seeds": [0, 1, 2], "datasets": ["synthetic"], "temperatures": [1.0, 0.5, 0.25, 0.125]},
        "paper": {
            "seeds": [0, 1, 2, 3, 4],
            "datasets": ["cub"],
            "temperatures": [1.0, 0.5, 0.25, 0.125, 1 / 16, 1 / 32],
        },
    },
    parameter_help={"datasets": "datasets to train on", "temperatures": "the swept T"},
    runs=runs,
    claims=(
        Claim(
            "NormSoftMax: R@1 at T = 1/2 above T = 1",
            lambda df: C.diff_at(df, "R@1", "temperature", BEST, 1.0),
            unit="R@1 points",
            differs=analogue.differs(
                "both temperatures at the profile's NormSoftMax settings", "normsoftmax"
            ),
            arms=("normsoftmax",),
            key="t2_vs_t1",
        ),
        Claim(
            "NormSoftMax: R@1 at T = 1/2 above the lowest T swept",
            _lowest,
            unit="R@1 points",
            differs=analogue.differs(
                lambda p: (
                    f"lowest T swept 1/{1 / min(ARTIFACT.parameters[p]['temperatures']):g} (the paper prints "
                    "its grid only as a curve)"
                ),
                "normsoftmax",
            ),
            arms=("normsoftmax",),
            key="below_t2",
        ),
    ),
    figures=(Figure(_figure, caption="R@1 against T, mean +- one std over seeds (shaded)."),),
)
