"""ProxyNCA++ Tables 7-10: the six enhancements switched on and off."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import analogue, figures, kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run, printed
from dmllab.experiments.compare import paired
from dmllab.experiments.params import Params
from dmllab.experiments.pnpp import _common as C

ALL = C.ENHANCEMENTS
# Table 7: ProxyNCA++ and each single removal (R@1, R@2-8, NMI).
TABLE7 = {"ProxyNCA++": ALL, **{f"-{e}": tuple(x for x in ALL if x != e) for e in ALL}}
# Tables 8-10 print these subsets (with / without prob, scale, max); the union, as enhancement tuples.
_T8 = [
    (),
    ("scale",),
    ("scale", "norm"),
    ("scale", "max"),
    ("scale", "norm", "cbs"),
    ("scale", "norm", "cbs", "max"),
    ("scale", "norm", "cbs", "max", "fast"),
]
_T9 = [
    (),
    ("cbs",),
    ("prob",),
    ("norm",),
    ("max",),
    ("fast",),
    ("max", "fast"),
    ("norm", "prob", "cbs"),
    ("norm", "prob", "cbs", "max"),
    ("norm", "prob", "cbs", "max", "fast"),
]
_T10 = [
    (),
    ("cbs",),
    ("prob",),
    ("norm",),
    ("scale",),
    ("fast",),
    ("scale", "fast"),
    ("norm", "prob", "cbs"),
    ("norm", "prob", "cbs", "fast"),
    ("norm", "prob", "cbs", "scale"),
    ("norm", "prob", "cbs", "scale", "fast"),
]
TABLE8 = [(s, on) for s in _T8 for on in (False, True)]  # (subset, with prob)
TABLE9 = [(s, on) for s in _T9 for on in (False, True)]  # (subset, with scale)
TABLE10 = [(s, on) for s in _T10 for on in (False, True)]  # (subset, with max)


def table_subsets() -> dict[str, tuple[str, ...]]:
    """Every subset Tables 8-10 print, by its ``config`` name."""
    out: dict[str, tuple[str, ...]] = {}
    for table, extra in ((TABLE8, "prob"), (TABLE9, "scale"), (TABLE10, "max")):
        for subset, on in table:
            enabled = tuple(e for e in ALL if e in subset or (on and e == extra))
            out[C.subset_name(enabled)] = enabled
    return out


# The Tables 8-10 subsets the claims compare (Sec. 3.6's fast-with-scale pairs, +scale and +max alone).
CLAIMED = ("baseline", "scale", "max", "scale+fast", "scale+max", "scale+max+fast")
TABLES_8_10 = ("all", "claimed", "none")


def subsets(params: Params) -> dict[str, tuple[str, ...]]:
    """``variant -> enabled enhancements``: Table 7 always; of Tables 8-10 every printed subset (``tables_8_10``
    "all"), the subsets the claims compare ("claimed") or none."""
    mode = params["tables_8_10"]
    if mode not in TABLES_8_10:
        raise ValueError(f"tables_8_10 must be one of {', '.join(TABLES_8_10)}, got {mode!r}")
    out = {name: tuple(on) for name, on in TABLE7.items()}
    seen = {C.subset_name(v) for v in out.values()}
    extra = {n: e for n, e in table_subsets().items() if n not in seen}
    if mode == "claimed":
        extra = {n: e for n, e in extra.items() if n in CLAIMED}
    if mode != "none":
        out.update(extra)
    return out


def runs(params: Params) -> list[Run]:
    """Every configuration per seed."""
    out: list[Run] = []
    for dataset in params["datasets"]:
        for variant, enabled in subsets(params).items():
            cfg = C.pnpp(dataset, params.profile, **C.subset_options(enabled))
            out += kit.seeds_runs(cfg, params, variant, config=C.subset_name(enabled))
    return out


# Configurations trained with Tables 8-10: Table 7's and every distinct subset Tables 8-10 print.
N_CONFIGS = len({C.subset_name(v) for v in TABLE7.values()} | set(table_subsets()))


def _table_cell(config: str) -> tuple[str, str, str] | None:
    """The Table 8-10 cell whose ``config=`` is ``config`` (Table 8 first, as transcribed)."""
    for label, table, extra, cols in (
        ("Table 8", TABLE8, "prob", ("without prob", "with prob")),
        ("Table 9", TABLE9, "scale", ("without scale", "with scale")),
        ("Table 10", TABLE10, "max", ("Global Average Pooling", "Global Max Pooling")),
    ):
        for subset, on in table:
            enabled = tuple(e for e in ALL if e in subset or (on and e == extra))
            if C.subset_name(enabled) == config:
                row = " ".join(f"+{e}" for e in subset) or "ProxyNCA (Emb: 2048)"  # "+scale +norm"
                return label, row, cols[on]
    return None


def reference(rec: Any) -> tuple[str, str, str, str] | None:
    dataset = C.REF_DATASET.get(str(rec.get("dataset")))
    variant, metric = str(rec.get("variant")), str(rec["metric"])
    if dataset is None or not (metric.startswith("R@") or metric == "NMI"):
        return None
    if variant in TABLE7:
        return "Table 7", "ProxyNCA++ (Emb: 2048)" if variant == "ProxyNCA++" else variant, metric, dataset
    if metric != "R@1":
        return None
    cell = _table_cell(variant)
    return None if cell is None else (*cell, dataset)


# What each removal changes on the benchmark beyond the analogue itself.
_REMOVAL = {
    "prob": "",
    "scale": "-scale is T = 1 as in the paper",
    "cbs": "random batches of the same size for 8 x 4 class-balanced ones",
    "norm": "",
    "max": C.pooling_line,
    "fast": lambda profile: (
        f"+fast {analogue.lr_line(C.pnpp('synthetic', profile))} vs -fast "
        f"{analogue.lr_line(C.pnpp('synthetic', profile, fast=False))} (paper: base lr 4e-3, proxies 4e2)"
    ),
}


def _removal(e: str) -> Claim:
    return Claim(
        f"+{e} helps: removing it from ProxyNCA++ lowers R@1",
        lambda df: paired(df, "R@1", {"variant": "ProxyNCA++"}, {"variant": f"-{e}"}),
        unit="R@1 points",
        paper_effect=printed(C.cell("Table 7", "ProxyNCA++ (Emb: 2048)"), C.cell("Table 7", f"-{e}")),
        primary=True,
        differs=analogue.differs(_REMOVAL[e], "proxynca++"),
        arms=("proxynca++",),
        key=f"remove_{e}",
    )


def _printed_subset(config: str) -> tuple[str, str, str, str]:
    """The Table 8-10 cell of a subset (``config`` name), as :func:`_table_cell` finds it."""
    cell = _table_cell(config)
    assert cell is not None, config
    return (*cell, "cub")


def _subset(text: str, better: str, worse: str, key: str, extra: Any = "") -> Claim:
    return Claim(
        text,
        lambda df: paired(df, "R@1", {"config": better}, {"config": worse}),
        unit="R@1 points",
        paper_effect=printed(_printed_subset(better), _printed_subset(worse)),
        differs=analogue.differs(extra, "proxynca++"),
        arms=("proxynca++",),
        key=key,
    )


LABELS = {"baseline": "ProxyNCA (no enhancement)"}


def _chart(tables: Any) -> Any:
    groups = [("Table 7: ProxyNCA++ and each single removal", list(TABLE7))]
    for label, table, extra in (
        ("Table 8", TABLE8, "prob"),
        ("Table 9", TABLE9, "scale"),
        ("Table 10", TABLE10, "max"),
    ):
        names = []
        for subset, on in table:
            name = C.subset_name(tuple(e for e in ALL if e in subset or (on and e == extra)))
            if name not in names and name not in {C.subset_name(v) for v in TABLE7.values()}:
                names.append(name)
        groups.append((f"{label}: subsets with and without +{extra}", names))
    return _dot_table(tables, groups)


def _dot_table(tables: Any, groups: list[tuple[str, list[str]]]) -> Any:
    """A table-like chart of the variants: one line each, grouped under headings (``groups``: ``(heading,
    variants)``), its R@1 mean over seeds with a +- one std bar, the seeds as ticks, and the paper's value where
    printed (:func:`dmllab.experiments.figures.anchored` at the first value the paper prints). Reads top to
    bottom."""
    import matplotlib.pyplot as plt

    rows = tables["rows"]
    data = rows[rows["metric"] == "R@1"]
    stats = data.groupby("variant")["value"].agg(["mean", "std"])
    lines: list[tuple[str, str | None]] = []
    for heading, values in groups:
        present = [v for v in values if v in stats.index]
        if present:
            lines += [(heading, None)] + [(LABELS.get(v, v), v) for v in present]
    fig, ax = plt.subplots(figsize=(7.0, 0.26 * len(lines) + 1.0))
    paper = figures.paper_values(tables, "R@1", ["variant"])
    order = [v for _, v in lines if v is not None]
    where, anchor = figures.anchored(
        {v: float(stats.loc[v, "mean"]) for v in order},
        {v: paper[(v,)] for v in order if (v,) in paper},
        order,
        relative=not figures.is_paper_profile(rows),
    )
    for y, (_, v) in enumerate(lines):
        if v is None:
            continue
        m, sd = float(stats.loc[v, "mean"]), float(stats.loc[v, "std"])
        ax.errorbar(
            [m], [y], xerr=[sd if sd == sd else 0.0], color="tab:blue", marker="o", capsize=3, markersize=5
        )
        seeds = data.loc[data["variant"] == v, "value"]
        ax.plot(seeds, [y] * len(seeds), "|", color="black", alpha=0.6, markersize=7)
        if v in where:
            ax.plot([where[v]], [y], marker="D", color=figures.PAPER_COLOUR, markersize=5, ls="")
    ax.set_yticks(range(len(lines)), [text for text, _ in lines], fontsize=8)
    for tick, (_, v) in zip(ax.get_yticklabels(), lines):
        if v is None:
            tick.set_fontweight("bold")
    ax.set_ylim(len(lines) - 0.5, -0.5)
    ax.set_xlabel("R@1 (%): mean +- std over seeds, seeds as ticks")
    ax.grid(axis="x", alpha=0.3)
    if where:
        figures.paper_legend(ax, anchor)
    ax.set_title("Tables 7-10: R@1 of each configuration", fontsize=10)
    fig.tight_layout()
    return fig


ARTIFACT = Artifact(
    id="pnpp_table7_10_ablation",
    paper="pnpp",
    label="Tables 7-10",
    tier="ablation",
    title="The six enhancements (+prob, +scale, +cbs, +norm, +max, +fast) on and off",
    description=(
        "ProxyNCA++ Table 7 removes each enhancement from ProxyNCA++ (CUB, 2048-d, R@1-8 and NMI); Tables 8, 9 "
        "and 10 add +prob, +scale and +max to the subsets they list (R@1); the ProxyNCA++, -max, -fast and "
        "-max -fast rows are also Tables 12-13's (pnpp_table12_13_normsoftmax shares these runs). Every "
        "variant is `presets.get('proxynca++', ..., prob=, scale=, cbs=, norm=, max=, fast=)`. The paper "
        f"profile trains every printed subset (Table 7's {len(TABLE7)} and the {len(table_subsets())} distinct "
        f"subsets of Tables 8-10, which overlap: {N_CONFIGS} configurations x 5 seeds on CUB). The quick profile "
        f"trains Table 7's {len(TABLE7)} and the {len(CLAIMED)} subsets of Tables 8-10 that the claims compare "
        "(`tables_8_10='claimed'`; 'all' trains every printed subset, 'none' Table 7's only) on the offline "
        "benchmark (facing CUB's cells), each seed on its own draw of the benchmark (`data_seed`)."
    ),
    parameters={
        "smoke": {"datasets": ["synthetic"], "tables_8_10": "none"},
        "quick": {"datasets": ["synthetic"], "tables_8_10": "claimed"},
        "paper": {"datasets": ["cub"], "tables_8_10": "all"},
    },
    parameter_help={
        "datasets": "datasets to train on",
        "tables_8_10": "Tables 8-10's subsets: all | claimed (those the claims compare) | none",
    },
    runs=runs,
    reference=reference,
    claims=tuple(_removal(e) for e in ALL)
    + (
        _subset(
            "fast proxies help together with low temperature (Sec. 3.6, Table 9: scale+fast vs scale, +1.4)",
            "scale+fast",
            "scale",
            "fast_with_scale",
            _REMOVAL["fast"],
        ),
        _subset(
            "fast proxies help together with low temperature and max pooling (Sec. 3.6, Table 9: "
            "scale+max+fast vs scale+max, +2.1)",
            "scale+max+fast",
            "scale+max",
            "fast_with_scale_max",
            _REMOVAL["fast"],
        ),
        _subset(
            "low temperature (+scale) helps ProxyNCA alone (Table 9, first row)",
            "scale",
            "baseline",
            "scale_alone",
        ),
        _subset(
            "global max pooling helps ProxyNCA alone (Table 10, first row)",
            "max",
            "baseline",
            "max_alone",
            _REMOVAL["max"],
        ),
    ),
    figures=(
        Figure(
            _chart,
            caption="R@1 of ProxyNCA++, each single removal and the Table 8-10 subsets trained (mean +- std over "
            "seeds, seeds as ticks); diamonds: the paper's values (on quick its differences to ProxyNCA++, drawn "
            "from the reproduced ProxyNCA++).",
        ),
    ),
    not_reproduced={
        "Tables 8-10 (smoke, quick)": "smoke trains Table 7's 7 configurations only; quick adds the "
        f"{len(CLAIMED)} subsets the claims compare (`tables_8_10='claimed'`, the run budget); the paper profile "
        "trains every printed subset (`tables_8_10='all'`)"
    },
)
