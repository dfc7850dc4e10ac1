"""The offline benchmark demo (notebook ``offline_benchmark``): what the quick profile's tables stand on.

It shows a grid of the synthetic fine-grained benchmark (one row per class; the first classes share a genus)
and the retrieval quality on its test classes of three networks with the same architecture (the
ProxyNCA++ preset of the profile): an untrained SmallCNN, the SmallCNN pre-trained on the disjoint
pre-training pool (no metric learning), and the same pre-trained SmallCNN trained with ProxyNCA++ through
``dmllab.training`` (reused from the run store when it was trained before).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dmllab.pipeline.artifacts import Artifact, Claim, register

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from matplotlib.figure import Figure

    from dmllab.training.config import ExperimentConfig

NAME = "offline_benchmark"
VARIANTS = ("untrained", "pre-trained only", "ProxyNCA++")
METHOD = "proxynca++"
DATASET = "synthetic"
# Retrieval metrics are stored in percent, as the papers print them.
_PERCENT_METRICS = ("R@", "NMI", "P@1", "RP", "MAP@R")


def preset(training_profile: str) -> ExperimentConfig:
    """The ProxyNCA++ preset on the synthetic benchmark at ``training_profile`` (``smoke`` or ``quick``)."""
    from dmllab.training import presets

    return presets.get(METHOD, DATASET, training_profile)


def test_dataset(cfg: ExperimentConfig, *, transform: bool = True) -> Any:
    """The benchmark's test split as the preset builds it (its transform, or raw images)."""
    from dmllab.data import build_dataset, build_transforms

    tf = build_transforms(cfg.data.transform, train=False) if transform else None
    return build_dataset(
        cfg.data.dataset, cfg.data.root, cfg.data.test_split, transform=tf, **dict(cfg.data.dataset_kwargs)
    )


def sample_grid(cfg: ExperimentConfig, n_classes: int = 8, per_class: int = 8, seed: int = 0) -> np.ndarray:
    """A uint8 picture of the test split: ``n_classes`` rows of ``per_class`` images."""
    from dmllab.data.synthetic import sample_grid as grid

    return grid(test_dataset(cfg, transform=False), n_classes=n_classes, per_class=per_class, seed=seed)


def to_percent(metrics: dict[str, float]) -> dict[str, float]:
    """Retrieval metrics from fractions to percent (the CSV convention)."""
    return {k: 100.0 * v if k.startswith(_PERCENT_METRICS) else v for k, v in metrics.items()}


def evaluate_network(cfg: ExperimentConfig, *, seed: int, device: str) -> dict[str, float]:
    """Test metrics (fractions) of the preset's network as built, before any metric learning.

    The network is built by the trainer (so ``model.pretrained`` means the same as in training: for SmallCNN the
    weights pre-trained on the disjoint pre-training pool) with ``seed``, then embedded and evaluated like a
    trained run.
    """
    from dmllab.training import Trainer
    from dmllab.training.trainer import seed_everything

    cfg = cfg.replace("run.device", device)
    trainer = Trainer(cfg, progress=False, seed=seed)
    seed_everything(seed)
    trainer.model = trainer.build_model().to(trainer.device)
    return trainer.evaluate(cfg.data.test_split)


def train_and_evaluate(cfg: ExperimentConfig, *, seed: int, device: str) -> tuple[dict[str, float], str, str]:
    """Train with the config through the run store (a stored run is reused); return (test metrics as
    fractions, config hash, run id)."""
    from dmllab.training import run

    result = run(cfg.replace("run.device", device), seed=seed, progress=False)
    return dict(result.metrics), result.config_hash, f"{result.config_hash}/seed{result.seed}"


def variants(cfg: ExperimentConfig) -> tuple[str, ...]:
    """The networks compared: "pre-trained only" only where the preset starts from pre-trained weights."""
    return VARIANTS if cfg.model.pretrained else tuple(v for v in VARIANTS if v != "pre-trained only")


def compute(training_profile: str, seeds: Sequence[int], device: str) -> list[dict[str, Any]]:
    """Tidy rows (variant, dataset, seed, metric, value in percent) for the compared networks and every seed."""
    cfg = preset(training_profile)
    rows = []
    for seed in seeds:
        per_variant = {
            "untrained": (
                evaluate_network(cfg.replace("model.pretrained", False), seed=seed, device=device),
                "",
                "",
            )
        }
        if cfg.model.pretrained:
            per_variant["pre-trained only"] = (evaluate_network(cfg, seed=seed, device=device), "", "")
        per_variant["ProxyNCA++"] = train_and_evaluate(cfg, seed=seed, device=device)
        for variant in variants(cfg):
            metrics, config_hash, run_id = per_variant[variant]
            for metric, value in to_percent(metrics).items():
                rows.append(
                    {
                        "variant": variant,
                        "dataset": DATASET,
                        "seed": seed,
                        "metric": metric,
                        "value": value,
                        "param_training_profile": training_profile,
                        "config_hash": config_hash,
                        "run_id": run_id,
                    }
                )
    return rows


def plot_recall(rows: pd.DataFrame, metric: str = "R@1") -> Figure:
    """Bar chart of ``metric`` per network (mean over seeds, with the seeds as points)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = rows[rows["metric"] == metric]
    order = [v for v in VARIANTS if v in set(data["variant"])]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    sns.barplot(data=data, x="variant", y="value", order=order, hue="variant", legend=False, ax=ax,
                errorbar=None)  # fmt: skip
    sns.stripplot(data=data, x="variant", y="value", order=order, color="black", size=4, ax=ax)
    for patch, variant in zip(ax.patches, order):
        mean = data.loc[data["variant"] == variant, "value"].mean()
        ax.annotate(f"{mean:.1f}", (patch.get_x() + patch.get_width() / 2, patch.get_height()), ha="center",
                    va="bottom", fontsize=9)  # fmt: skip
    ax.set_xlabel("")
    ax.set_ylabel(f"{metric} (%) on the test classes")
    ax.set_title("Offline benchmark: what metric learning adds")
    return fig


def plot_grid(grid: np.ndarray) -> Figure:
    """Show a sample grid (rows = classes)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6 * grid.shape[0] / grid.shape[1]))
    ax.imshow(grid, interpolation="nearest")
    ax.set_axis_off()
    ax.set_title("Synthetic fine-grained benchmark: test classes (one per row)")
    return fig


def _mean(df: pd.DataFrame, variant: str, metric: str = "R@1") -> float | None:
    sel = df[(df["variant"] == variant) & (df["metric"] == metric)]["value"]
    return float(sel.mean()) if len(sel) else None


def _beats(df: pd.DataFrame, better: str, worse: str, margin: float) -> bool | None:
    a, b = _mean(df, better), _mean(df, worse)
    return None if a is None or b is None else a > b + margin


CELLS = (
    (
        "markdown",
        "## Compute\nThree networks of the same architecture, evaluated on the benchmark's test classes.",
    ),
    (
        "code",
        "from dmllab.pipeline import demo\n\ncfg = demo.preset(P['training_profile'])\nrows = demo.compute(P['training_profile'], P.seeds, P.device)",
    ),
    (
        "markdown",
        "## Write results\nTidy rows to `results/offline_benchmark.csv` (retrieval metrics in percent).",
    ),
    (
        "code",
        "P.write_results(rows)\nresults = P.read_results()\nresults.pivot_table(index='variant', columns='metric', values='value')",
    ),
    ("markdown", "## Figures\nA sample of the benchmark, and R@1 of the three networks (from the CSV)."),
    ("code", "fig = demo.plot_grid(demo.sample_grid(cfg))\nP.save_figure(fig, '_samples')"),
    ("code", "fig = demo.plot_recall(results)\nP.save_figure(fig)"),
)

ARTIFACT = register(
    Artifact(
        name=NAME,
        paper="dmllab",
        artifact="Offline benchmark",
        title="The offline benchmark: untrained vs pre-trained vs ProxyNCA++",
        description=(
            "The synthetic fine-grained benchmark stands in for CUB/Cars/SOP/In-Shop on the quick profile: "
            "class-disjoint train/val/test halves of procedurally drawn 'species'. A SmallCNN pre-trained on a "
            "disjoint pool of classes is trained with ProxyNCA++ (the quick preset); R@K and NMI on the test "
            "classes are compared with the untrained and the pre-trained-only network."
        ),
        parameters={
            "smoke": {"seeds": [0], "training_profile": "smoke"},
            "quick": {"seeds": [0], "training_profile": "quick"},
            # The benchmark has no paper-scale counterpart: the paper profile repeats the quick setup over seeds.
            "paper": {"seeds": [0, 1, 2], "training_profile": "quick"},
        },
        claims=(
            Claim(
                "ProxyNCA++ training beats the untrained network's R@1 by more than 10 points",
                lambda df: _beats(df, "ProxyNCA++", "untrained", 10.0),
                paper_says="yes (expected)",
            ),
            Claim(
                "metric learning improves on the pre-trained features (R@1)",
                lambda df: _beats(df, "ProxyNCA++", "pre-trained only", 0.0),
                paper_says="yes (expected)",
            ),
        ),
        cells=CELLS,
        parameter_help={"training_profile": "preset profile of dmllab.training (smoke | quick)"},
    )
)
