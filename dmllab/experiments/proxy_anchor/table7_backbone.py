"""Proxy Anchor Table 7: backbone network and input image size."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import analogue, kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run, printed
from dmllab.experiments.compare import extremes
from dmllab.experiments.params import Params
from dmllab.experiments.proxy_anchor._common import pa_config, recall_column


def _settings(params: Params) -> list[dict[str, Any]]:
    """One dict per row: variant name, the paper row it faces, and the config overrides."""
    out = []
    for name, row, over in params["settings"]:
        out.append({"variant": name, "row": row, "overrides": dict(over)})
    return out


def runs(params: Params) -> list[Run]:
    out: list[Run] = []
    for ds in params["datasets"]:
        for i, s in enumerate(_settings(params)):
            over = {
                k: (tuple(tuple(p) for p in v) if isinstance(v, list) else v)
                for k, v in s["overrides"].items()
            }
            cfg = pa_config(params.profile, ds, dim=params["dim"], overrides=over)
            out += kit.seeds_runs(cfg, params, s["variant"], order=i, paper_row=s["row"])
    return out


def reference(rec: Any) -> tuple[str, str, str, str] | None:
    if not str(rec["metric"]).startswith("R@") or not rec.get("param_paper_row"):
        return None
    ds = kit.stand_in(str(rec["dataset"]))
    return "Table 7", str(rec["param_paper_row"]), recall_column(ds, str(rec["metric"])), ds


def _figure(tables: Any) -> Any:
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = tables["rows"][tables["rows"]["metric"] == "R@1"].sort_values("param_order")
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    sns.barplot(data=data, x="variant", y="value", hue="dataset", errorbar="sd", ax=ax)
    ax.set(xlabel="", ylabel="R@1 (%)", title="Proxy Anchor: backbone and image size")
    ax.tick_params(axis="x", labelrotation=15)
    fig.tight_layout()
    return fig


_R50 = [["model.backbone", "resnet50"]]
ARTIFACT = Artifact(
    id="pa_table7_backbone",
    paper="proxy_anchor",
    label="Table 7",
    tier="ablation",
    title="Proxy Anchor with other backbones and image sizes",
    description=(
        "Proxy Anchor Table 7 (supplement; CUB, Cars, 512-d): GoogLeNet, Inception-BN, ResNet-50, ResNet-101 at "
        '224 x 224, and Inception-BN at 256/324/448: "a more powerful architecture achieves a better score in '
        'general"; "the accuracy improves consistently as the sizes of the input images increase". dmllab: '
        "the torchvision backbones of its registry (GoogLeNet, ResNet-50); Inception-BN and ResNet-101 are not "
        "in it (see not reproduced). Quick analogue of 'a more powerful backbone': the SmallCNN at width 8 and "
        "16 (the preset's, shared), each pre-trained on the synthetic pre-training pool at its own width (the "
        "weights source pre-trains a width on first use). Each row faces the paper row of the same rank "
        "(weaker: GoogLeNet, stronger: ResNet-50)."
    ),
    parameters={
        "smoke": {
            "datasets": ["cub"],
            "dim": 16,
            "settings": [
                ["SmallCNN width 4", "GoogleNet 224 × 224", [["model.backbone.width", 4]]],
                ["SmallCNN width 8", "ResNet-50 224 × 224", []],
            ],
        },
        "quick": {
            "datasets": ["cub"],
            "dim": 128,
            "settings": [
                ["SmallCNN width 8", "GoogleNet 224 × 224", [["model.backbone.width", 8]]],
                ["SmallCNN width 16", "ResNet-50 224 × 224", []],
            ],
        },
        "paper": {
            "seeds": [0, 1, 2],
            "datasets": ["cub", "cars"],
            "dim": 512,
            "settings": [
                ["GoogLeNet 224", "GoogleNet 224 × 224", [["model.backbone", "googlenet"]]],
                ["ResNet-50 224", "ResNet-50 224 × 224", _R50],
            ],
        },
    },
    parameter_help={
        "datasets": "paper datasets (the offline benchmark on smoke/quick)",
        "dim": "embedding size",
        "settings": "[name, paper row, [[config key, value], ...]] per row, weakest first",
    },
    runs=runs,
    reference=reference,
    claims=(
        Claim(
            "the stronger backbone (last setting) beats the weaker one (first setting) in R@1",
            lambda df: extremes(df, "R@1", "order", low_minus_high=False),
            unit="R@1 points",
            differs=analogue.differs(
                lambda p: (
                    f"{ARTIFACT.parameters[p]['settings'][0][0]} vs {ARTIFACT.parameters[p]['settings'][-1][0]}"
                    " (each pre-trained on the synthetic pool at its width) stand in for GoogLeNet vs ResNet-50"
                ),
                "proxy_anchor",
                paper="GoogLeNet vs ResNet-50 (the registry has no Inception-BN or ResNet-101)",
            ),
            arms=("proxy_anchor",),
            paper_effect=printed(
                ("Table 7", "ResNet-50 224 × 224", recall_column("cub", "R@1"), "cub"),
                ("Table 7", "GoogleNet 224 × 224", recall_column("cub", "R@1"), "cub"),
            ),
            primary=True,
            key="backbone",
        ),
    ),
    figures=(Figure(_figure, caption="R@1 per backbone (mean and std over seeds)."),),
    not_reproduced={
        "Inception-BN rows (224, 256, 324, 448)": "torchvision has no BN-Inception and dmllab's backbone "
        "registry has no ImageNet weights for it",
        "ResNet-101 224 × 224": "not in dmllab's backbone registry (resnet18, resnet50, googlenet, inception_v3, "
        "smallcnn); adding it is one registry line plus its weights",
        "image size on the quick profile": "the benchmark is rendered at 64 pixels with one crop transform",
    },
)
