"""The offline benchmark: what the quick profile's tables stand on (untrained vs pre-trained vs ProxyNCA++, over
draws of the benchmark), and which methods train on it at all (each method's gain over the pre-trained network).
"""

from __future__ import annotations

import math
from typing import Any

from dmllab.experiments import analogue, gate, kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run
from dmllab.experiments.compare import paired
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params

METHOD, DATASET = "proxynca++", "synthetic"
VARIANTS = ("untrained", "pre-trained only", "ProxyNCA++")
PNPP, PRE = {"variant": "ProxyNCA++"}, {"variant": "pre-trained only"}
PRETRAINED = "pre-trained network"  # the gate's reference: no metric learning, on validation, each pooling

# Every method the quick study trains, by its label (the label every claim's ``arms`` uses): preset method and
# options of its default run. Proxy Synthesis bases are the base losses without PS (PS on/off is the arms' switch).
PS_BASES = ("softmax", "normsoftmax", "proxynca", "softtriple", "proxy_anchor", "virtual_softmax")
TRAINS: dict[str, tuple[str, dict[str, Any]]] = {
    "proxynca": ("proxynca", {}),
    "proxynca++": ("proxynca++", {}),
    "normsoftmax": ("normsoftmax", {}),
    "proxy_anchor": ("proxy_anchor", {}),
    **{f"heated_softmax:{v}": ("heated_softmax", {"variant": v}) for v in ("SM", "LN", "BN")},
    "margin": ("margin", {}),
    "triplet_semihard": ("triplet_semihard", {}),
    "multi_similarity": ("multi_similarity", {}),
    **{f"proxy_synthesis:{b}": ("proxy_synthesis", {"base": b}) for b in PS_BASES},
}
# A method trains when the 95% lower bound of its per-seed validation R@1 gain over the pre-trained network with the
# same pooling (summed GAP + GMP for Proxy Anchor's head) is above gate.THRESHOLD (pre-registered:
# docs/preregistration.md).
GAIN = gate.GAIN_METRIC
VALIDATION_SPLIT = "val"


def preset(profile: str) -> Any:
    """The ProxyNCA++ preset on the synthetic benchmark (the paper profile repeats the quick setup: the benchmark
    has no paper-scale counterpart)."""
    from dmllab.training import presets

    return presets.get(METHOD, DATASET, "smoke" if profile == "smoke" else "quick")


def method_config(label: str, profile: str) -> Any:
    """The default run of method ``label`` on the benchmark (built as the other artifacts build it, so the run is
    theirs: a Proxy Synthesis base is its PS preset without its Proxy Synthesis wrapper)."""
    method, options = TRAINS[label]
    cfg = kit.config(method, DATASET, "smoke" if profile == "smoke" else "quick", **options)
    from dmllab.training.presets.proxy_synthesis import without_synthesis

    return without_synthesis(cfg) if method == "proxy_synthesis" else cfg


def gate_config(label: str, profile: str) -> Any:
    """Method ``label``'s recipe in the validation protocol (:data:`dmllab.experiments.kit.VALIDATION`: one stage
    on the training classes, validation R@1 after every epoch); Proxy Anchor Fig. 1's runs for its four methods."""
    cfg = method_config(label, profile)
    for key, value in kit.VALIDATION.items():
        cfg = cfg.replace(key, value)  # a value the recipe already has leaves it equal, so hashed alike
    return cfg


def reference_pool(cfg: Any) -> str:
    """The pooling of the pre-trained network a method faces: its own global pooling (summed GAP + GMP for a head
    that sums them), max pooling for a k-max head (the k-max of a network without metric learning is its max)."""
    pool = cfg.model.pooling.name
    return "max" if pool == "kmax" else pool


def trains_runs(params: Params) -> list[Run]:
    """Every method's recipe in the validation protocol, per seed (the gate's runs)."""
    out: list[Run] = []
    for label in params["methods"]:
        out += kit.seeds_runs(gate_config(label, params.profile), params, label, role="trains")
    return out


def runs(params: Params) -> list[Run]:
    """ProxyNCA++ on each seed's draw (the quick preset's run every table shares) and every method's gate run."""
    return kit.seeds_runs(preset(params.profile), params, "ProxyNCA++") + trains_runs(params)


def _headline(params: Params, lookup: Lookup, trained: list[Run]) -> list[dict[str, Any]]:
    """The network before training (untrained; pre-trained only) on each seed's draw, next to ProxyNCA++."""
    from dmllab.results import tidy

    out: list[dict[str, Any]] = []
    for run in trained:
        cfg = lookup.place(run).config
        labels = {"dataset": DATASET, "seed": run.seed}
        out += tidy(
            kit.evaluate_network(cfg.replace("model.pretrained", False), seed=run.seed),
            variant="untrained",
            **labels,
        )
        if cfg.model.pretrained:
            out += tidy(kit.evaluate_network(cfg, seed=run.seed), variant="pre-trained only", **labels)
    return out


def _final_val(result: Any) -> float:
    """Validation R@1 (percent) of a run's last epoch in its history; NaN where it has none."""
    values = [h.get("val_R@1") for h in result.history if h.get("val_R@1") is not None]
    return 100.0 * float(values[-1]) if values and values[-1] == values[-1] else math.nan


def _gate_values(params: Params, lookup: Lookup) -> dict[str, dict[int, tuple[float, str]]]:
    """``label -> seed -> (validation R@1 of the gate run's final model, its run id)``; NaN for a diverged run."""
    from dmllab.training.store import DivergedRunError

    out: dict[str, dict[int, tuple[float, Run]]] = {}
    for label in params["methods"]:
        for run in kit.seeds_runs(gate_config(label, params.profile), params, label):
            try:
                val = _final_val(lookup.result(run))
            except DivergedRunError:
                val = math.nan
            out.setdefault(label, {})[run.seed] = (val, lookup.place(run))
    return out


def _trains(
    params: Params, lookup: Lookup, values: dict[str, dict[int, tuple[float, Run]]]
) -> list[dict[str, Any]]:
    """Per method and seed: the validation R@1 of its gate run's final model (``values``) minus that of the
    pre-trained network with the same pooling on the same draw (the ProxyNCA++ preset's network as built, as
    pnpp_table11_pooling's "without training"), and the pre-trained network's rows themselves."""
    if not params["methods"]:
        return []
    base = preset(params.profile).replace("data.test_split", VALIDATION_SPLIT)
    pools = {label: reference_pool(method_config(label, params.profile)) for label in values}
    reference = kit.untrained_rows(
        lookup,
        base,
        params.seeds,
        sorted(set(pools.values()) | {"avg", "max"}),
        variant=PRETRAINED,
        role="trains",
        split=VALIDATION_SPLIT,
    )
    r1 = {(r["param_pool"], r["seed"]): r["value"] for r in reference if r["metric"] == "R@1"}
    out = list(reference)
    for label, by_seed in values.items():
        pool = pools[label]
        for seed, (val, placed) in by_seed.items():
            out.append(
                {
                    "variant": label,
                    "dataset": DATASET,
                    "seed": seed,
                    "metric": GAIN,
                    "value": val - r1[(pool, seed)],
                    "param_pool": pool,
                    "param_role": "trains",
                    "param_split": VALIDATION_SPLIT,
                    "draw": placed.draw,
                    "run_id": placed.key,
                }
            )
    return out


def rows(params: Params, lookup: Lookup) -> list[dict[str, Any]]:
    """Every run read first (trained here where allowed), then the networks before training evaluated."""
    trained = kit.seeds_runs(preset(params.profile), params, "ProxyNCA++")
    out = lookup.rows(trained)
    values = _gate_values(params, lookup)
    return out + _headline(params, lookup, trained) + _trains(params, lookup, values)


def trains_table(rows_: Any) -> Any:
    """Per method: the validation gain's mean, std and 95% lower bound over seeds, the threshold and whether it
    trains (:func:`dmllab.experiments.gate.from_gains`: the lower bound above the threshold, no diverged seed)."""
    import pandas as pd

    gain = rows_[rows_["metric"] == GAIN]
    out = []
    for label, part in gain.groupby("variant", sort=False):
        g = gate.from_gains(part["value"])
        out.append(
            {
                "variant": label,
                "gain": g.mean,
                "std": float(part["value"].std()),
                "low": g.low,
                "seeds": g.seeds,
                "pool": part["param_pool"].iloc[0],
                "threshold": g.threshold,
                "trains": g.trains,
            }
        )
    return pd.DataFrame(
        out, columns=["variant", "gain", "std", "low", "seeds", "pool", "threshold", "trains"]
    )


def plot_recall(tables: Any, metric: str = "R@1") -> Any:
    """Bar chart of ``metric`` per network (mean over seeds, with the seeds as points)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    rows_ = tables["rows"]
    data = rows_[(rows_["metric"] == metric) & rows_["variant"].isin(VARIANTS)]
    order = [v for v in VARIANTS if v in set(data["variant"])]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    sns.barplot(
        data=data, x="variant", y="value", order=order, hue="variant", legend=False, ax=ax, errorbar=None
    )
    sns.stripplot(data=data, x="variant", y="value", order=order, color="black", size=4, ax=ax)
    for patch, variant in zip(ax.patches, order):
        mean = data.loc[data["variant"] == variant, "value"].mean()
        top = (patch.get_x() + patch.get_width() / 2, patch.get_height())
        ax.annotate(f"{mean:.1f}", top, ha="center", va="bottom", fontsize=9)
    ax.set_xlabel("")
    ax.set_ylabel(f"{metric} (%) on the test classes")
    ax.set_title("Offline benchmark: what metric learning adds (seed k on draw k)")
    return fig


def plot_trains(tables: Any) -> Any:
    """Each method's gain over the pre-trained network with the same pooling (mean bar, seeds as points), with its
    threshold; green: the method trains."""
    import matplotlib.pyplot as plt

    rows_ = tables["rows"]
    gain = rows_[rows_["metric"] == GAIN]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.55 * gain["variant"].nunique() + 2), 4.0))
    if gain.empty:
        ax.text(0.5, 0.5, "no 'trains' rows on this profile", ha="center")
        ax.set_axis_off()
        return fig
    table = trains_table(rows_)
    x = range(len(table))
    ax.bar(x, table["gain"], color=["tab:green" if t else "tab:red" for t in table["trains"]], alpha=0.7)
    for i, rec in enumerate(table.to_dict("records")):
        pts = gain.loc[gain["variant"] == rec["variant"], "value"]
        ax.scatter([i] * len(pts), pts, color="black", s=10, zorder=3)
        ax.hlines(rec["threshold"], i - 0.4, i + 0.4, color="black", ls="--", lw=1)
        if math.isfinite(rec["low"]):
            ax.plot([i], [rec["low"]], marker="^", color="black", markersize=6, zorder=4)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(list(x), table["variant"], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("validation R@1 gain over the pre-trained network (points)")
    ax.set_title(
        "Which methods train (green: the 95% lower bound, a triangle, is above the threshold, dashed)",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def plot_samples(tables: Any) -> Any:
    """A grid of the benchmark's test classes (one per row). The images are data drawn by the package's
    deterministic generator (the version recorded in every run key), not a result, so they are regenerated."""
    import matplotlib.pyplot as plt

    from dmllab.data import build_dataset
    from dmllab.data.synthetic import sample_grid

    profile = str(tables["rows"]["profile"].iloc[0]) if len(tables["rows"]) else "quick"
    cfg = preset(profile)
    ds = build_dataset(
        cfg.data.dataset.name, cfg.data.root, cfg.data.test_split, transform=None, **cfg.data.dataset.kw
    )
    grid = sample_grid(ds, n_classes=8, per_class=8, seed=0)
    fig, ax = plt.subplots(figsize=(6, 6 * grid.shape[0] / grid.shape[1]))
    ax.imshow(grid, interpolation="nearest")
    ax.set_axis_off()
    ax.set_title("Synthetic fine-grained benchmark: test classes (one per row)")
    return fig


_HEADLINE = "seed k trains on draw k: other classes, images and pre-trained trunk per seed"

ARTIFACT = Artifact(
    id="offline_benchmark",
    paper="dmllab",
    label="Offline benchmark",
    title="The offline benchmark: untrained vs pre-trained vs ProxyNCA++, and which methods train on it",
    description=(
        "The synthetic fine-grained benchmark stands in for CUB/Cars/SOP/In-Shop on the quick profile: "
        "class-disjoint train/val/test halves of procedurally drawn 'species'. A SmallCNN pre-trained on a "
        "disjoint pool of classes is trained with ProxyNCA++ (the quick preset); R@K and NMI on the test "
        "classes are compared with the untrained and the pre-trained-only network, paired on the seed. Seed k "
        "trains on draw k of the benchmark (`data_seed='per_seed'`: the generator's seed, so other classes, "
        "other images, another pre-training pool and so another pre-trained trunk), as in every artifact, so "
        "the interval over seeds covers the benchmark draw and the trunk as well as the initialisation and the "
        "batch order.\n\n"
        "Which methods train, decided on validation: for every method the quick study trains (`methods`), its "
        "recipe trained in the validation protocol (one stage on the training classes; Proxy Anchor Fig. 1's "
        "runs for its four methods) and the validation R@1 of its final model minus that of the pre-trained "
        "network without metric learning with the same global pooling on the same draw (the ProxyNCA++ "
        "preset's network as built, as pnpp_table11_pooling's 'without training'; a head summing GAP and GMP, "
        f"Proxy Anchor's, faces the network with the same summed pooling): rows `metric = {GAIN}`, `variant` = "
        f"the method's label. A method trains (learns) when the lower bound of the 95% t interval of its gains is "
        f"above {gate.THRESHOLD:g} and no seed diverged (pre-registered: docs/preregistration.md); a claim whose "
        "better arms include one that does not is not testable (an arm the claim says is worse is never gated). "
        "The test split plays no part in the gate."
    ),
    parameters={
        "smoke": {"methods": ["proxynca++", "proxy_anchor"]},
        "quick": {"methods": list(TRAINS)},
        "paper": {"data_seed": "per_seed", "methods": []},
    },
    benchmark_on_paper=True,  # the benchmark itself: on the paper profile it repeats the quick setup
    parameter_help={
        "methods": "method labels whose gain over the pre-trained network is measured (their default runs)"
    },
    runs=runs,
    rows=rows,
    claims=(
        # The benchmark's design targets, not statements of a paper: checks, shown apart and never counted.
        Claim(
            "metric learning improves on the pre-trained features (R@1) on every seed",
            lambda df: paired(df, "R@1", PNPP, PRE),
            unit="R@1 points",
            paper_says="yes (design target)",
            differs=analogue.differs(_HEADLINE, METHOD, "cub"),
            kind="check",
            key="beats_pretrained",
        ),
        Claim(
            "the quick profile keeps a signal of at least 15 R@1 points over the pre-trained features on every seed",
            lambda df: paired(df, "R@1", PNPP, PRE) - 15.0,
            unit="R@1 points above +15",
            paper_says="yes (design target)",
            differs=analogue.differs(_HEADLINE, METHOD, "cub"),
            kind="check",
            key="signal_15",
        ),
    ),
    figures=(
        Figure(plot_samples, suffix="_samples", caption="A sample of the benchmark's test classes."),
        Figure(plot_recall, caption="R@1 of the three networks (from the CSV)."),
        Figure(
            plot_trains,
            suffix="_trains",
            caption="Which methods train: each method's validation R@1 gain over the pre-trained network with its "
            "pooling (mean, seeds as points), its 95% lower bound and the threshold it must be above.",
        ),
    ),
)
