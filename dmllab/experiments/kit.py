"""What artifacts share: configs built the one way that lets artifacts share runs, seed sweeps, draws of the
benchmark, validation runs, the untrained network's metrics, what a claim's analogue changes from the paper, t-SNE,
images for figures, and the standard figures (bars per variant, sweep curves).

Runs are shared across artifacts by building the same config the same way: every config is
``presets.get(method, dataset, profile, **options)`` plus only the keys an artifact varies, and a key is replaced
only where it differs from the preset (:func:`config`), so a preset's default run of a profile is one run set used
by every table of the paper.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from dmllab.experiments.arrays import arrays_to_frame
from dmllab.experiments.artifact import STAND_IN_DATASET, Run
from dmllab.experiments.params import Params
from dmllab.profiles import PROFILES

TOY_PROFILES = ("smoke", "quick")


# ------------------------------------------------------------------------------------------------ configs


def benchmark_for(profile: str, dataset: str) -> str:
    """The dataset a paper dataset is trained on at ``profile``: the offline benchmark on smoke/quick."""
    return "synthetic" if profile in TOY_PROFILES else dataset


def stand_in(dataset: str) -> str:
    """The paper dataset whose printed cells a row of ``dataset`` faces (the benchmark faces CUB)."""
    return STAND_IN_DATASET.get(dataset, dataset)


def config(
    method: str,
    dataset: str,
    profile: str,
    *,
    overrides: Mapping[str, Any] | None = None,
    **options: Any,
) -> Any:
    """``presets.get(method, dataset, profile, **options)`` with ``overrides`` (dotted keys) applied only where
    they change the preset, so an unchanged config hashes like the preset; its schedule checked."""
    from dmllab.training import presets

    cfg = presets.get(method, dataset, profile, **options)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, name = key.partition(".")
        current = getattr(getattr(cfg, section), name) if name else getattr(cfg, section)
        if current != value:
            cfg = cfg.replace(key, value)
    return presets.check(cfg)


def seeds_runs(cfg: Any, params: Params, variant: str, **tags: Any) -> list[Run]:
    """One :class:`Run` of ``cfg`` per seed of ``params``, labelled ``variant`` and tagged ``tags``."""
    return [Run(cfg, seed, variant=variant, tags=tuple(tags.items())) for seed in params.seeds]


def draw_of(params: Params, seed: int) -> int:
    """The benchmark draw that run seed ``seed`` trains on: ``seed`` itself where the artifact's ``data_seed``
    parameter is ``"per_seed"``, else (``"fixed"``, or None where that is the profile's default) the default
    draw 0."""
    mode = params.get("data_seed")
    if mode not in (None, "fixed", "per_seed"):
        raise ValueError(f"data_seed must be 'per_seed' or 'fixed', got {mode!r}")
    return int(seed) if mode == "per_seed" else 0


def on_draw(cfg: Any, draw: int) -> Any:
    """``cfg`` on draw ``draw`` of the synthetic benchmark: the dataset's generation seed (other classes, other
    images, another pre-training pool; its caches are keyed on it) and, for the pre-trained SmallCNN, the trunk
    pre-trained once on that draw's pre-training pool (backbone keyword ``pretrain_seed``, which keys its weights
    and so the run). Draw 0 is the default: ``cfg`` unchanged, so its runs are every other artifact's.

    Raises:
        ValueError: a draw other than 0 of a dataset other than the synthetic benchmark.
    """
    from dmllab.training.config import pairs

    if not draw:
        return cfg
    if cfg.data.dataset != "synthetic":
        raise ValueError(f"a data draw redraws the synthetic benchmark; {cfg.dataset!r} has one draw")
    cfg = cfg.replace("data.dataset_kwargs", pairs(dict(cfg.data.dataset_kwargs), seed=int(draw)))
    m = cfg.model
    if m.backbone == "smallcnn" and m.pretrained and m.weights_path is None:
        cfg = cfg.replace("model.backbone_kwargs", pairs(dict(m.backbone_kwargs), pretrain_seed=int(draw)))
    return cfg


def draw_runs(cfg: Any, params: Params, variant: str, **tags: Any) -> list[Run]:
    """:func:`seeds_runs` with seed k on the draw :func:`draw_of` gives it (tagged ``data_seed``)."""
    out = []
    for seed in params.seeds:
        draw = draw_of(params, seed)
        run_tags = (*tags.items(), ("data_seed", draw))
        out.append(Run(on_draw(cfg, draw), seed, variant=variant, tags=run_tags))
    return out


def on_validation(cfg: Any) -> Any:
    """``cfg`` trained on the ``train`` split for its whole schedule (one stage) and evaluated on the validation
    split as its test split, as ``dmllab tune`` builds its trials: the run's test metrics are validation metrics
    and the test split is never read (model selection on validation only). The validation split is watched
    every epoch only where a plateau rule needs it.

    Raises:
        ValueError: the dataset has no validation split.
    """
    d = cfg.data
    if d.val_split is None:
        raise ValueError(f"dataset {cfg.dataset!r} has no validation split")
    return replace(
        cfg,
        data=replace(
            d,
            train_split="train",
            val_split=d.val_split if cfg.schedule.scheduler == "plateau" else None,
            test_split=d.val_split,
            query_split=None,
            gallery_split=None,
        ),
        run=replace(cfg.run, two_stage=False, keep_best=False),
    )


def over_seeds(
    fn: Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]],
    seeds: Sequence[int],
    table: str | None = None,
    **kwargs: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A toy for every seed: ``fn(seed=s, **kwargs)``; all rows, and the first seed's plot data as
    ``{table: frame}`` (:func:`dmllab.experiments.arrays.arrays_to_frame`)."""
    rows: list[dict[str, Any]] = []
    plot: dict[str, Any] | None = None
    for seed in seeds:
        r, d = fn(seed=seed, **kwargs)
        rows += r
        plot = d if plot is None else plot
    return rows, ({table: arrays_to_frame(plot or {})} if table else {})


# ------------------------------------------------------------------------------------ networks and data


def evaluate_network(cfg: Any, *, seed: int) -> dict[str, float]:
    """Test metrics (fractions) of ``cfg``'s network as built, before any metric learning (pre-trained trunk,
    embedding layer initialised with ``seed``). The frozen-prefix feature cache (a speed device of training) is
    off: the network is the same function without it."""
    from dmllab.training import Trainer
    from dmllab.training.trainer import seed_everything

    cfg = cfg.replace("data.feature_views", 0).replace("model.frozen_blocks", 0)
    trainer = Trainer(cfg, progress=False, seed=seed)
    seed_everything(seed)
    trainer.model = trainer.build_model().to(trainer.device)
    return trainer.evaluate(cfg.data.test_split)


def untrained_rows(
    cfg: Any, seeds: Sequence[int], pools: Sequence[str], *, variant: str, **labels: Any
) -> list[dict[str, Any]]:
    """Tidy test-metric rows of ``cfg``'s network as built (:func:`evaluate_network`) with each global pooling of
    ``pools``, per seed (column ``param_pool``): the pre-trained network without metric learning."""
    from dmllab.results import tidy

    out: list[dict[str, Any]] = []
    for pool in pools:
        pooled = cfg if cfg.model.pooling == pool else cfg.replace("model.pooling", pool)
        for seed in seeds:
            out += tidy(
                evaluate_network(pooled, seed=seed),
                variant=variant,
                dataset=cfg.dataset,
                seed=seed,
                pool=pool,
                **labels,
            )
    return out


def raw_dataset(cfg: Any, split: str) -> Any:
    """``split`` of ``cfg``'s dataset without a transform (images for figures; the data are regenerated or read,
    never stored as results)."""
    from dmllab.data import build_dataset

    kw = dict(cfg.data.dataset_kwargs)
    if cfg.data.dataset == "synthetic":
        kw["progress"] = False
    return build_dataset(cfg.data.dataset, cfg.data.root, split, transform=None, **kw)


def image_files(dataset: Any, indices: Sequence[int]) -> list[str | None]:
    """The files of images ``indices`` of ``dataset`` (one read from a folder: its ``image_path``), so that a
    figure table names the images it shows and the figure is drawn from the table wherever the data root is;
    ``None`` each for a dataset rendered in memory (the offline benchmark: :func:`figure_images` rebuilds it)."""
    path = getattr(dataset, "image_path", None)
    return [str(path(int(i))) if path is not None else None for i in indices]


def figure_images(table: Any, dataset: Callable[[], Any]) -> dict[int, Any]:
    """``{index: PIL image}`` of the rows of a figure table: read from its ``image`` column where it names the
    files (:func:`image_files`), else from ``dataset()`` (:func:`raw_dataset`)."""
    if "image" in table and table["image"].notna().all():
        from pathlib import Path

        from dmllab.data.real import load_image

        return {int(i): load_image(Path(p)) for i, p in zip(table["index"], table["image"])}
    ds = dataset()
    return {int(i): ds[int(i)][0] for i in table["index"]}


def tsne(points: Any, seed: int = 0, perplexity: float = 30.0) -> Any:
    """2-D t-SNE (scikit-learn, PCA init) of ``points`` (N, D) as float32; perplexity capped at (N - 1) / 3 (and
    at least 2) for small N."""
    import numpy as np
    from sklearn.manifold import TSNE

    x = np.asarray(points, dtype=np.float32)
    perp = float(min(perplexity, max(2.0, (len(x) - 1) / 3)))
    return TSNE(n_components=2, perplexity=perp, init="pca", random_state=seed).fit_transform(x)


def tsne_by_class(
    emb: Any, labels: Any, *, classes: int, per_class: int, seed: int
) -> list[tuple[int, float, float]]:
    """``(label, x, y)`` of a t-SNE (:func:`tsne`) of the first ``per_class`` samples of each of the first
    ``classes`` labels (a readable picture)."""
    import numpy as np

    y = np.asarray(labels)
    keep = np.isin(y, np.unique(y)[:classes])
    e, y = np.asarray(emb)[keep], y[keep]
    sel = np.concatenate([np.flatnonzero(y == c)[:per_class] for c in np.unique(y)])
    xy = tsne(e[sel], seed=seed)
    return [(int(y[s]), float(a), float(b)) for s, (a, b) in zip(sel, xy)]


# ------------------------------------------------------------------------------ what differs from the paper

_BACKBONE = {
    "resnet50": "ResNet-50",
    "resnet18": "ResNet-18",
    "googlenet": "GoogLeNet",
    "inception_v3": "Inception-v3",
}
# Methods whose paper trained BN-Inception, for which torchvision has no weights (the paper preset: ResNet-50).
BN_INCEPTION_PAPERS = ("proxy_anchor", "proxy_synthesis")
BN_INCEPTION = "ResNet-50 stands in for BN-Inception (torchvision has no BN-Inception weights)"
_DATASET = {
    "cub": "CUB",
    "cars": "Cars",
    "sop": "SOP",
    "inshop": "In-Shop",
    "synthetic": "the offline benchmark",
}


def network_line(cfg: Any) -> str:
    """The network of ``cfg`` in a few words: "SmallCNN w16 (synthetic pre-training, 4 blocks frozen), 128-d"."""
    m = cfg.model
    if m.backbone == "smallcnn":
        kw = dict(m.backbone_kwargs)
        bits = ["synthetic pre-training" if m.pretrained else "from scratch"]
        if m.frozen_blocks:
            bits.append(f"{m.frozen_blocks} blocks frozen")
        name = f"SmallCNN w{kw.get('width', 32)} ({', '.join(bits)})"
    else:
        name = _BACKBONE.get(m.backbone, m.backbone) + (" (ImageNet)" if m.pretrained else "")
    return f"{name}, {m.embedding_dim}-d"


def group_lrs(cfg: Any) -> dict[str, float]:
    """The learning rate of each optimiser group (backbone, embedding, proxies) that ``cfg`` trains with, by the
    trainer's own rule (:func:`dmllab.training.optim.param_groups`)."""
    from torch import nn

    from dmllab.training.optim import param_groups

    model = nn.Module()
    model.backbone, model.head = nn.Linear(1, 1), nn.Linear(1, 1)
    return {g["name"]: float(g["lr"]) for g in param_groups(model, nn.Linear(1, 1), cfg.optim)}


def lr_line(cfg: Any, groups: Sequence[str] = ("backbone", "embedding", "proxies")) -> str:
    """``cfg``'s learning rates of ``groups`` in a few words: "lr trunk 1, embedding 0.004, proxies 400"."""
    lrs = group_lrs(cfg)
    return "lr " + ", ".join(f"{'trunk' if k == 'backbone' else k} {lrs[k]:.3g}" for k in groups if k in lrs)


def _schedule_parts(cfg: Any) -> list[str]:
    """Epochs, lr rule, heating and protocol of ``cfg``, each in a few words."""
    s, d = cfg.schedule, cfg.data
    parts = [f"{s.epochs}+{s.warmup_epochs}w epochs" if s.warmup_epochs else f"{s.epochs} epochs"]
    if s.scheduler == "plateau":
        parts.append("plateau lr drops")
    elif s.scheduler == "multistep" and s.milestones:
        parts.append(f"{len(s.milestones)} lr drop{'s' if len(s.milestones) > 1 else ''} x{s.factor:g}")
    else:
        parts.append("constant lr" if s.scheduler == "none" else f"{s.scheduler} lr")
    if s.heat_epoch:
        parts.append(f"heated in-run from epoch {s.heat_epoch}")
    if cfg.finetune.epochs:
        parts.append(f"heated in a {cfg.finetune.epochs}-epoch fine-tune of the converged run")
    parts.append("two-stage (train, then trainval)" if cfg.run.two_stage else f"one stage on {d.train_split}")
    return parts


def schedule_line(cfg: Any) -> str:
    """The schedule and protocol of ``cfg`` in a few words: "8+1w epochs, constant lr, one stage on trainval"."""
    return ", ".join(_schedule_parts(cfg))


def analogue(method: str, dataset: str, profile: str, **options: Any) -> str:
    """What the ``profile`` preset of ``method`` changes from its paper preset on the paper dataset ``dataset``:
    network, data and schedule (what the paper does after "for"; a schedule part both share is said once),
    derived from the presets, so a changed preset changes the line."""
    from dmllab.training import presets

    here = presets.get(method, benchmark_for(profile, dataset), profile, **options)
    paper = presets.get(method, dataset, "paper", **options)
    paper_net = network_line(paper)
    if method.partition(":")[0] in BN_INCEPTION_PAPERS and paper.model.backbone == "resnet50":
        paper_net = paper_net.replace("ResNet-50 (ImageNet)", "ResNet-50 (ImageNet; the paper: BN-Inception)")
    mine, theirs = _schedule_parts(here), _schedule_parts(paper)
    only_paper = [p for p in theirs if p not in mine]
    schedule = ", ".join(mine) + (f" for {', '.join(only_paper)}" if only_paper else "")
    return (
        f"{network_line(here)} on {_DATASET.get(here.dataset, here.dataset)} for "
        f"{paper_net} on {_DATASET.get(paper.dataset, paper.dataset)}; {schedule}"
    )


class Differs(Mapping[str, str]):
    """``{profile: line}`` for :attr:`dmllab.experiments.artifact.Claim.differs`, computed when first read (no
    preset is built at import): on smoke and quick, the claim's own difference followed by :func:`analogue` of
    its method; on the paper profile ``paper`` where given (no entry otherwise)."""

    def __init__(
        self,
        specific: str | Callable[[str], str],
        method: str,
        dataset: str,
        paper: str | Callable[[str], str],
        options: Mapping[str, Any],
    ) -> None:
        self._specific, self._method, self._dataset, self._options = specific, method, dataset, dict(options)
        self._paper = paper
        self._cache: dict[str, str] = {}

    def _profiles(self) -> tuple[str, ...]:
        return tuple(p for p in PROFILES if p in TOY_PROFILES or (p == "paper" and self._paper))

    def __getitem__(self, profile: str) -> str:
        if profile not in self._profiles():
            raise KeyError(profile)
        if profile not in self._cache:
            if profile == "paper":
                self._cache[profile] = self._paper(profile) if callable(self._paper) else self._paper
            else:
                own = self._specific(profile) if callable(self._specific) else self._specific
                scale = (
                    analogue(self._method, self._dataset, profile, **self._options) if self._method else ""
                )
                self._cache[profile] = "; ".join(x for x in (own, scale) if x)
        return self._cache[profile]

    def __iter__(self) -> Iterator[str]:
        return iter(self._profiles())

    def __len__(self) -> int:
        return len(self._profiles())

    def __repr__(self) -> str:
        return f"Differs({self._specific!r}, {self._method!r}, {self._dataset!r})"


def differs(
    specific: str | Callable[[str], str],
    method: str = "",
    dataset: str = "cub",
    *,
    paper: str | Callable[[str], str] = "",
    **options: Any,
) -> Differs:
    """A claim's ``differs``: ``specific`` (a line, or ``profile -> line``) says what this comparison changes from
    the paper; ``method`` (with ``options``) on the paper dataset ``dataset`` adds the profile's network, data and
    schedule against the paper's (:func:`analogue`; none for a toy: ``method=""``); ``paper`` (a line, or
    ``profile -> line``): what the paper profile's preset changes (e.g. ResNet-50 for BN-Inception), if
    anything."""
    return Differs(specific, method, dataset, paper, options)


# ------------------------------------------------------------------------------------------------ figures


def bar_figure(
    tables: Mapping[str, Any],
    *,
    metric: str = "R@1",
    order: Sequence[str] | None = None,
    title: str = "",
    hue: str | None = None,
) -> Any:
    """Bars of ``metric`` per variant (mean over seeds, std error bars, the seeds as points), one panel per
    dataset."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    rows = tables["rows"]
    data = rows[rows["metric"] == metric]
    dsets = list(dict.fromkeys(data["dataset"])) or ["-"]
    fig, axes = plt.subplots(
        1,
        len(dsets),
        figsize=(max(5.0, 0.9 * (len(order or set(data["variant"])) + 2)) * len(dsets) ** 0.6, 3.8),
        squeeze=False,
    )
    for ax, dset in zip(axes[0], dsets):
        sub = data[data["dataset"] == dset]
        present = [v for v in (order or dict.fromkeys(sub["variant"])) if v in set(sub["variant"])]
        if sub.empty:
            ax.set_axis_off()
            continue
        sns.barplot(
            data=sub,
            x="variant",
            y="value",
            order=present,
            hue=hue or "variant",
            legend=bool(hue),
            errorbar="sd",
            ax=ax,
            capsize=0.15,
        )
        sns.stripplot(
            data=sub, x="variant", y="value", order=present, color="black", size=3, ax=ax, dodge=False
        )
        ax.set_xlabel("")
        ax.set_ylabel(f"{metric} (%)")
        ax.set_title(f"{title} ({dset})" if title else str(dset), fontsize=10)
        ax.tick_params(axis="x", rotation=35)
        for lab in ax.get_xticklabels():
            lab.set_horizontalalignment("right")
    fig.tight_layout()
    return fig


def sweep_figure(
    tables: Mapping[str, Any],
    param: str,
    *,
    metric: str = "R@1",
    logx: bool = True,
    xlabel: str | None = None,
    title: str = "",
    by: str | None = None,
    mark: float | None = None,
) -> Any:
    """``metric`` against ``param_<param>``: mean over seeds with a shaded +- one std (as ProxyNCA++'s
    Figs. 4-6), one line per ``by`` value (or per dataset)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    rows = tables["rows"]
    col = f"param_{param}"
    data = rows[(rows["metric"] == metric)].copy()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    if col not in data.columns or data.empty:
        ax.text(0.5, 0.5, "no rows", ha="center")
        return fig
    data[col] = pd.to_numeric(data[col], errors="coerce")
    data = data.dropna(subset=[col])
    for name, sub in data.groupby(by or "dataset", sort=False):
        s = (
            sub.groupby([col], sort=False)["value"]
            .agg(["mean", "std", "count"])
            .reset_index()
            .sort_values(col)
        )
        std = s["std"].fillna(0.0)
        ax.plot(s[col], s["mean"], marker="o", label=str(name))
        ax.fill_between(s[col], s["mean"] - std, s["mean"] + std, alpha=0.2)
    if mark is not None:
        ax.axvline(mark, color="grey", ls=":", lw=1)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel or param)
    ax.set_ylabel(f"{metric} (%), mean +- std over seeds")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def errorbar_lines(ax: Any, data: Any, x: str, hue: str, *, metric: str = "R@1", logx: bool = False) -> None:
    """Mean +- std over seeds of ``metric`` against ``x``, one line per ``hue`` value."""
    sel = data[data["metric"] == metric]
    for name, part in sel.groupby(hue, sort=False):
        stats = part.groupby(x)["value"].agg(["mean", "std"]).sort_index()
        ax.errorbar(
            stats.index.astype(float),
            stats["mean"],
            yerr=stats["std"].fillna(0),
            marker="o",
            capsize=3,
            label=str(name),
        )
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_ylabel(f"{metric} (%)")
    ax.legend(fontsize=8)


def mean_std_plot(ax: Any, data: Any, x: str, hue: str | None = None, y: str = "value") -> None:
    """Points at the mean over seeds with std error bars (seaborn's point plot)."""
    import seaborn as sns

    sns.pointplot(
        data=data,
        x=x,
        y=y,
        hue=hue,
        errorbar="sd",
        ax=ax,
        dodge=0.3 if hue else False,
        capsize=0.1,
        linestyles="-",
    )
