"""ProxyNCA++ Table 11: global average vs global max pooling, without training and for three other losses."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import analogue, figures, kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run, printed
from dmllab.experiments.compare import paired
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params
from dmllab.experiments.pnpp import _common as C

UNTRAINED = "Without Training [R50, 2048]"
# variant (the reference row without its pooling suffix) -> (preset method, paper embedding size, backbone)
LOSSES = {
    "Margin [33] [R50, 128]": ("margin", 128, "resnet50"),
    "Triplet-Semihard sampling [22] [R50, 128]": ("triplet_semihard", 128, "resnet50"),
    "MS [32] [R50, 512]": ("multi_similarity", 512, "resnet50"),
    "MS [32] [I3, 512]": ("multi_similarity", 512, "inception_v3"),
}
POOLS = ("avg", "max")


def losses(params: Params) -> dict[str, tuple[str, int, str]]:
    return {v: spec for v, spec in LOSSES.items() if params["inception"] or spec[2] == "resnet50"}


def build(method: str, dataset: str, profile: str, dim: int, backbone: str, pool: str) -> Any:
    """The pair-loss preset with ``pool`` pooling; on the paper profile Table 11's embedding size and backbone
    (quick/smoke keep the profile's SmallCNN and embedding size)."""
    cfg = kit.config(method, dataset, profile)
    if profile == "paper":
        cfg = cfg.replace("model.embedding_dim", dim)
        if backbone != cfg.model.backbone.name:
            cfg = cfg.replace("model.backbone", backbone)
    return cfg if pool == cfg.model.pooling.name else cfg.replace("model.pooling", pool)


def runs(params: Params) -> list[Run]:
    out: list[Run] = []
    for dataset in params["datasets"]:
        for variant, (method, dim, backbone) in losses(params).items():
            for pool in POOLS:
                cfg = build(method, dataset, params.profile, dim, backbone, pool)
                out += [Run(cfg, s, variant=variant, tags=(("pool", pool),)) for s in params.seeds]
    return out


def rows(params: Params, lookup: Lookup) -> list[dict[str, Any]]:
    """The trained losses' rows, plus the untrained network (pre-trained trunk, the preset's embedding layer
    as initialised with the seed) evaluated with each pooling."""
    out = lookup.rows(runs(params))
    for dataset in params["datasets"]:
        out += kit.untrained_rows(
            lookup, C.pnpp(dataset, params.profile), params.seeds, POOLS, variant=UNTRAINED
        )
    return out


def reference(rec: Any) -> tuple[str, str, str, str] | None:
    dataset = C.REF_DATASET.get(str(rec.get("dataset")))
    if dataset != "cub" or rec["metric"] != "R@1":
        return None
    return "Table 11", f"{rec['variant']} {rec.get('param_pool')}", "R@1", dataset


_PAIR = "the pair losses in a dmllab setup (AdamW, class-balanced batches; the paper gives none)"
_NO_I3 = "the SmallCNN has no Inception-v3 counterpart: the paper profile trains this row"


def _gmp_beats_gap(variant: str, short: str, key: str) -> Claim:
    method = LOSSES[variant][0] if variant in LOSSES else ""
    if method:
        differs = analogue.differs(_PAIR + ", at the profile's embedding size", method)
    else:
        differs = analogue.differs(
            "the pre-trained SmallCNN with the ProxyNCA++ preset's seed-initialised embedding layer (paper: "
            "the ImageNet ResNet-50's 2048-d pooled features)",
            "proxynca++",
        )
    inception = LOSSES.get(variant, ("", 0, ""))[2] == "inception_v3"
    return Claim(
        f"GMP beats GAP: {short} (R@1)",
        lambda df: paired(
            df, "R@1", {"variant": variant, "pool": "max"}, {"variant": variant, "pool": "avg"}
        ),
        unit="R@1 points",
        paper_effect=printed(C.cell("Table 11", f"{variant} max"), C.cell("Table 11", f"{variant} avg")),
        primary=bool(method),
        differs=differs,
        arms=(method,) if method else (),
        not_testable={"smoke": _NO_I3, "quick": _NO_I3} if inception else {},
        key=key,
    )


ARTIFACT = Artifact(
    id="pnpp_table11_pooling",
    paper="pnpp",
    label="Table 11",
    tier="ablation",
    title="Global average vs global max pooling: no training, Margin, Triplet semi-hard, Multi-Similarity",
    description=(
        "ProxyNCA++ Table 11: R@1 on CUB with GAP and with GMP for the ImageNet network without training "
        "(R50, 2048-d), Margin and Triplet semi-hard (R50, 128-d), Multi-Similarity (R50 and Inception-v3, "
        "512-d) and HORDE; GMP wins everywhere but for HORDE. dmllab trains its pair-loss presets (AdamW, "
        "class-balanced batches, the ProxyNCA++ protocol: a dmllab setup, the paper gives none) with "
        "`model.pooling` avg or max; 'without training' is the ProxyNCA++ preset's network as built (the "
        "pre-trained trunk and the embedding layer initialised with the seed, so the seed matters) evaluated "
        "with either pooling. Quick: the offline benchmark's SmallCNN at the profile's 128-d for every loss, "
        "without the Inception-v3 row (no SmallCNN counterpart); rows face CUB's cells."
    ),
    parameters={
        "smoke": {"datasets": ["synthetic"], "inception": False},
        "quick": {"datasets": ["synthetic"], "inception": False},
        "paper": {"datasets": ["cub"], "inception": True},
    },
    parameter_help={"datasets": "datasets to train on", "inception": "also train the MS [I3, 512] row"},
    runs=runs,
    rows=rows,
    reference=reference,
    claims=(
        _gmp_beats_gap(UNTRAINED, "without training", "untrained"),
        _gmp_beats_gap("Margin [33] [R50, 128]", "Margin", "margin"),
        _gmp_beats_gap("Triplet-Semihard sampling [22] [R50, 128]", "Triplet semi-hard", "triplet"),
        _gmp_beats_gap("MS [32] [R50, 512]", "Multi-Similarity (R50)", "ms_r50"),
        _gmp_beats_gap("MS [32] [I3, 512]", "Multi-Similarity (Inception-v3; paper profile only)", "ms_i3"),
    ),
    figures=(
        Figure(
            lambda tables: figures.bar_figure(
                tables, order=[UNTRAINED, *LOSSES], hue="param_pool", title="Table 11: GAP vs GMP"
            ),
            caption="R@1 with GAP and GMP per network (mean +- std over seeds). Diamonds: the paper's values (on quick its GMP - GAP difference, drawn from the reproduced GAP bar).",
        ),
    ),
    not_reproduced={
        "Horde (Contrastive Loss) [13] [I3, 512]": "HORDE (high-order regularizer) is not implemented in dmllab",
        "MS [32] [I3, 512] (quick profile)": "the quick profile has no Inception-v3 counterpart; paper profile only",
    },
)
