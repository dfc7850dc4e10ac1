"""Proxy Synthesis Table 1: which of the original / synthetic embeddings and proxies enter the loss (M1-M4, PS)."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import figures
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run, printed
from dmllab.experiments.compare import paired
from dmllab.experiments.params import Params
from dmllab.experiments.proxy_synthesis import _common as C

# row -> (with Proxy Synthesis, its embeddings, its proxies); M1 is the base loss (= Norm-softmax without PS, the
# Table 6 run), PS = (both, both) (= the Table 6 "PS + Norm-softmax" run).
COMPOSITIONS: dict[str, tuple[bool, str, str]] = {
    "M1 (baseline)": (False, "both", "both"),
    "M2": (True, "synthetic", "synthetic"),
    "M3": (True, "original", "both"),
    "M4": (True, "synthetic", "both"),
    "Proxy Synthesis": (True, "both", "both"),
}


def runs(params: Params) -> list[Run]:
    out = []
    for ds in C.datasets(params.profile, params["datasets"]):
        for name in params["compositions"]:
            ps, emb, prox = COMPOSITIONS[name]
            cfg = C.config(params.profile, ds, "normsoftmax", ps=ps)
            if ps:
                cfg = cfg.replace("loss.embeddings", emb).replace("loss.proxies", prox)
            out += [
                Run(
                    cfg,
                    seed,
                    variant=name,
                    tags=(("embeddings", emb if ps else "original"), ("proxies", prox if ps else "original")),
                )
                for seed in params.seeds
            ]
    return out


def reference(rec: Any) -> tuple[str, ...] | None:
    if rec["metric"] != "R@1" or rec["variant"] not in COMPOSITIONS:
        return None
    return ("Table 1", str(rec["variant"]), "R@1", C.stand_in(rec))


_NS = (C.arm("normsoftmax"),)
_SAME = C.differs("every composition with the profile's PS + Norm-softmax preset")


def _claim(text: str, better: str, worse: str, key: str, **kw: Any) -> Claim:
    return Claim(
        text,
        lambda df: paired(df, "R@1", {"variant": better}, {"variant": worse}),
        unit="R@1 points",
        paper_effect=printed(C.cell("Table 1", better, "R@1"), C.cell("Table 1", worse, "R@1")),
        differs=_SAME,
        arms=_NS,
        key=key,
        training_fit=True,
        **kw,
    )


ARTIFACT = Artifact(
    id="ps_table1_composition",
    paper="proxy_synthesis",
    label="Table 1",
    tier="ablation",
    title="Impact of synthetic embeddings and proxies (M1-M4 vs Proxy Synthesis)",
    description=(
        "PS Table 1 (CARS196, PS + Norm-softmax): the loss sees original and/or synthetic embeddings (X^) and "
        "proxies (P^): M1 = original only (the base loss), M2 = synthetic only, M3 = original embeddings with "
        "all proxies, M4 = synthetic embeddings with all proxies, PS = all. dmllab sets the PS wrapper's `loss.embeddings` / "
        "`loss.proxies` on the profile's PS preset (the released setup on the paper profile); M1 and PS are the "
        "Table 6 Norm-softmax runs (shared). "
        "Quick: the offline benchmark (rows face the paper's Cars column), paired on the seed."
    ),
    parameters={
        "smoke": {"compositions": ["M1 (baseline)", "M2", "Proxy Synthesis"], "datasets": ["synthetic"]},
        "quick": {"compositions": list(COMPOSITIONS), "datasets": ["synthetic"]},
        "paper": {"seeds": [0, 1, 2], "compositions": list(COMPOSITIONS), "datasets": ["cars"]},
    },
    parameter_help={"compositions": "Table 1 rows", "datasets": "paper-profile datasets (Cars in the paper)"},
    runs=runs,
    reference=reference,
    claims=(
        _claim(
            "PS (all embeddings and proxies) beats the baseline M1",
            "Proxy Synthesis",
            "M1 (baseline)",
            "ps_m1",
        ),
        _claim(
            "synthetic embeddings and proxies only (M2) are slightly worse than M1",
            "M1 (baseline)",
            "M2",
            "m2",
        ),
        _claim("adding synthetic proxies (M3) beats M1", "M3", "M1 (baseline)", "m3"),
        _claim("synthetic embeddings with all proxies (M4) beat M1", "M4", "M1 (baseline)", "m4"),
        _claim("PS beats M3 (every element helps)", "Proxy Synthesis", "M3", "ps_m3", primary=True),
        _claim("PS beats M4", "Proxy Synthesis", "M4", "ps_m4", primary=True),
    ),
    figures=(
        Figure(
            lambda tables: figures.bar_figure(
                tables,
                order=list(COMPOSITIONS),
                title="PS Table 1: original / synthetic embeddings and proxies",
            ),
            caption="R@1 per composition (mean +- std over seeds, seeds as points); diamonds: the paper's R@1 (on "
            "quick its differences to M1, drawn from the reproduced M1).",
        ),
    ),
)
