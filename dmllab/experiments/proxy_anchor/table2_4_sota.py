"""Proxy Anchor Tables 2-4: R@K of Proxy Anchor at a low and a high embedding size (and with larger crops)."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run
from dmllab.experiments.compare import paired
from dmllab.experiments.params import Params
from dmllab.experiments.proxy_anchor._common import TABLE, differs, pa_config, recall_column

LOW, HIGH, CROPS = "PA low-d", "PA high-d", "PA high-d, larger crops"
PRINTED_K = {"cub": (1, 2, 4, 8), "cars": (1, 2, 4, 8), "sop": (1, 10, 100, 1000), "inshop": (1, 10, 20, 40)}
ROW = {LOW: "Proxy-Anchor^64", HIGH: "Proxy-Anchor^512", CROPS: "†Proxy-Anchor^512"}


def runs(params: Params) -> list[Run]:
    out: list[Run] = []
    for ds in params["datasets"]:
        low = params["low_dim_inshop"] if ds == "inshop" else params["low_dim"]
        out += kit.seeds_runs(pa_config(params.profile, ds, dim=low), params, LOW, dim=low)
        out += kit.seeds_runs(
            pa_config(params.profile, ds, dim=params["high_dim"]), params, HIGH, dim=params["high_dim"]
        )
        if params["larger_crops_transform"]:
            cfg = pa_config(
                params.profile,
                ds,
                dim=params["high_dim"],
                overrides={"data.transform": params["larger_crops_transform"]},
            )
            out += kit.seeds_runs(cfg, params, CROPS, dim=params["high_dim"])
    return out


def reference(rec: Any) -> tuple[str, str, str, str] | None:
    if not str(rec["metric"]).startswith("R@") or rec["variant"] not in ROW:
        return None
    ds = kit.stand_in(str(rec["dataset"]))
    if int(str(rec["metric"])[2:]) not in PRINTED_K[ds]:
        return None
    row = ROW[rec["variant"]]
    if ds == "inshop" and rec["variant"] == LOW:
        row = "Proxy-Anchor^128"
    return TABLE[ds], row, recall_column(ds, str(rec["metric"])), ds


_NO_LARGER = "the benchmark is rendered at 64 pixels with one crop size: there is no larger-image setting"


def _figure(tables: Any) -> Any:
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = tables["rows"][tables["rows"]["metric"].astype(str).str.startswith("R@")].copy()
    data["k"] = data["metric"].str[2:].astype(int)
    order = sorted(data["k"].unique())
    datasets = list(dict.fromkeys(data["dataset"]))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.5 * len(datasets), 3.6), squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        part = data[data["dataset"] == ds]
        sns.barplot(data=part, x="k", y="value", hue="variant", order=order, errorbar="sd", ax=ax)
        ax.set_xlabel("K")
        ax.set_ylabel("R@K (%)")
        ax.set_title(f"Proxy Anchor on {ds}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


ARTIFACT = Artifact(
    id="pa_table2_4_sota",
    paper="proxy_anchor",
    label="Tables 2-4",
    tier="headline",
    title="Proxy Anchor R@K at a low and a high embedding size (and larger crops)",
    description=(
        "Proxy Anchor Tables 2 (CUB, Cars), 3 (SOP) and 4 (In-Shop): Proxy-Anchor^64 (^128 on In-Shop), "
        "Proxy-Anchor^512 and †Proxy-Anchor^512 (256 x 256 crops) with BN-Inception, one run each. dmllab: the "
        "Proxy Anchor preset (ResNet-50 stand-in for BN-Inception, which torchvision lacks; the released ResNet-50 "
        "recipe, fixed schedule on trainval, last model tested) at both sizes; the larger-crop row uses the "
        "`proxynca++` transform (RandomResizedCrop(256), test Resize(288) + CenterCrop(256)) as the 256-pixel "
        "setting (dmllab choice: the paper does not state its resize). Quick: the offline benchmark at 32-d and "
        "128-d (the quick preset's size, so this run is shared by Tables 5-7 and Figs. 5/6); no larger-crop row "
        "(the benchmark is rendered at 64 pixels with 56-pixel crops, there is no larger setting to train). The "
        "quick rows face the paper's CUB cells; absolute numbers are not comparable."
    ),
    parameters={
        "smoke": {
            "seeds": [0, 1],
            "datasets": ["cub"],
            "low_dim": 8,
            "low_dim_inshop": 8,
            "high_dim": 16,
            "larger_crops_transform": None,
        },
        "quick": {
            "seeds": [0, 1, 2],
            "datasets": ["cub"],
            "low_dim": 32,
            "low_dim_inshop": 32,
            "high_dim": 128,
            "larger_crops_transform": None,
        },
        "paper": {
            "seeds": [0, 1, 2],
            "datasets": ["cub", "cars", "sop", "inshop"],
            "low_dim": 64,
            "low_dim_inshop": 128,
            "high_dim": 512,
            "larger_crops_transform": "proxynca++",
        },
    },
    parameter_help={
        "datasets": "paper datasets (the offline benchmark stands in for them on smoke/quick)",
        "low_dim": "the low embedding size (Proxy-Anchor^64)",
        "low_dim_inshop": "the low embedding size on In-Shop (Proxy-Anchor^128)",
        "high_dim": "the high embedding size (Proxy-Anchor^512)",
        "larger_crops_transform": "transform of the larger-crop row (None: no such row)",
    },
    runs=runs,
    reference=reference,
    claims=(
        Claim(
            "the high-dimensional embedding beats the low-dimensional one (R@1)",
            lambda df: paired(df, "R@1", {"variant": HIGH}, {"variant": LOW}),
            unit="R@1 points",
            differs=differs(
                lambda p: (
                    f"{ARTIFACT.parameters[p]['low_dim']}-d vs {ARTIFACT.parameters[p]['high_dim']}-d "
                    "stand in for 64-d vs 512-d"
                )
            ),
            arms=("proxy_anchor",),
            key="dim",
        ),
        Claim(
            "larger input images improve R@1 (paper profile only)",
            lambda df: paired(df, "R@1", {"variant": CROPS}, {"variant": HIGH}),
            unit="R@1 points",
            differs=differs("no larger-image setting"),
            arms=("proxy_anchor",),
            not_testable={p: _NO_LARGER for p in ("smoke", "quick")},
            key="larger_images",
        ),
    ),
    figures=(Figure(_figure, caption="R@K per dataset and setting (mean and std over seeds)."),),
    not_reproduced={
        "BN-Inception backbone": "torchvision has no BN-Inception: ResNet-50 (the released code's other recipe) "
        "stands in on the paper profile",
        "†Proxy-Anchor^512 on the quick profile": "the offline benchmark has no larger-image setting",
        "other methods' rows": "literature numbers, not retrained",
    },
)
