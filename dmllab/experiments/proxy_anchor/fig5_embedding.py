"""Proxy Anchor Fig. 5: R@1 against embedding size, Proxy Anchor vs Multi-Similarity."""

from __future__ import annotations

from typing import Any

import pandas as pd

from dmllab.experiments import kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run
from dmllab.experiments.compare import extremes, members, paired, with_arms
from dmllab.experiments.params import Params
from dmllab.experiments.proxy_anchor._common import config, differs, errorbar_lines, pa_config

PA, MS = "Proxy Anchor", "Multi-Similarity"


def runs(params: Params) -> list[Run]:
    ds = params["dataset"]
    out: list[Run] = []
    for d in params["dims"]:
        out += kit.seeds_runs(pa_config(params.profile, ds, dim=d), params, PA, dim=d)
        ms = config("multi_similarity", params.profile, ds, overrides={"model.embedding_dim": d})
        out += kit.seeds_runs(ms, params, MS, dim=d)
    return out


def _pa_minus_ms(df: pd.DataFrame) -> pd.DataFrame:
    """Per seed: Proxy Anchor's R@1 minus Multi-Similarity's, one member per embedding size."""
    dims = sorted(df.loc[df["metric"] == "R@1", "param_dim"].dropna().unique())
    return members(
        {
            f"{int(float(d))}-d": paired(df, "R@1", {"variant": PA, "dim": d}, {"variant": MS, "dim": d})
            for d in dims
        }
    )


def _robustness(df: pd.DataFrame) -> pd.Series:
    """Per seed: (PA's R@1 change from the smallest to the largest size) minus MS's."""
    pa = extremes(df, "R@1", "dim", low_minus_high=False, variant=PA)
    ms = extremes(df, "R@1", "dim", low_minus_high=False, variant=MS)
    rows = df[df["metric"] == "R@1"]
    return with_arms((pa - ms).dropna(), rows[rows["variant"] == PA], rows[rows["variant"] == MS])


def _sizes(profile: str) -> str:
    dims = ARTIFACT.parameters[profile]["dims"]
    return f"embedding sizes {', '.join(map(str, dims))} (paper: 32-1024); MS in the dmllab pair-loss setup"


def _figure(tables: Any) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    errorbar_lines(ax, tables["rows"], "param_dim", "variant", logx=True)
    ax.set(xlabel="embedding size", title="R@1 against embedding size")
    return fig


ARTIFACT = Artifact(
    id="pa_fig5_embedding",
    paper="proxy_anchor",
    label="Fig. 5",
    title="R@1 against embedding size: Proxy Anchor vs Multi-Similarity",
    description=(
        'Proxy Anchor Fig. 5 (Cars, dims 32-1024): "our loss outperforms MS loss in all embedding dimensions, '
        'and ... its accuracy does not degrade even with the very high dimensional embedding unlike MS loss". '
        "dmllab: the Proxy Anchor and Multi-Similarity presets (each with its own protocol; on the paper profile "
        "MS trains the pair baselines' two-stage protocol) with only the embedding size changed. Quick: 32 and 128 (both shared with "
        "Tables 2-7; a third size is cut for the run budget) on the offline benchmark. The paper prints no numbers for this figure."
    ),
    parameters={
        "smoke": {"dataset": "cars", "dims": [8, 16]},
        "quick": {"dataset": "cars", "dims": [32, 128]},
        "paper": {"seeds": [0, 1, 2], "dataset": "cars", "dims": [32, 64, 128, 256, 512, 1024]},
    },
    parameter_help={
        "dataset": "paper dataset (Cars; the offline benchmark on smoke/quick)",
        "dims": "embedding sizes",
    },
    runs=runs,
    claims=(
        Claim(
            "Proxy Anchor beats Multi-Similarity at every embedding size",
            _pa_minus_ms,
            unit="R@1 points",
            differs=differs(_sizes, "cars"),
            arms=("proxy_anchor",),
            worse_arms=("multi_similarity",),
            primary=True,
            key="pa_vs_ms",
        ),
        Claim(
            "Proxy Anchor gains more (or loses less) than MS from the smallest to the largest size",
            _robustness,
            unit="R@1 points",
            differs=differs(_sizes, "cars"),
            arms=("proxy_anchor",),
            worse_arms=("multi_similarity",),
            key="robust_to_size",
        ),
    ),
    figures=(Figure(_figure, caption="R@1 against embedding size (mean and std over seeds)."),),
)
