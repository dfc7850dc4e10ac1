"""What artifacts share: configs built the one way that lets artifacts share runs, seed sweeps, draws of the
benchmark, validation runs and the untrained network's metrics. What a claim's analogue changes from the paper is in
:mod:`dmllab.experiments.analogue`; t-SNE, images for figures and the standard figures (bars per variant, sweep
curves) in :mod:`dmllab.experiments.figures`.

Runs are shared across artifacts by building the same config the same way: every config is
``presets.get(method, dataset, profile, **options)`` plus only the keys an artifact varies, and a key is replaced
only where it differs from the preset (:func:`config`), so a preset's default run of a profile is one run set used
by every table of the paper.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dmllab.experiments.arrays import arrays_to_frame
from dmllab.experiments.artifact import STAND_IN_DATASET, Run
from dmllab.experiments.params import Params

TOY_PROFILES = ("smoke", "quick")
# The validation protocol: one stage on the training classes (``train``), R@1 on the held-out validation classes
# after every epoch (the run's history), the test split untouched by the selection. Proxy Anchor Fig. 1's curves
# and the offline benchmark's "does the method train" gate read it.
VALIDATION = {"run.two_stage": False, "data.train_split": "train", "run.eval_every": 1}


# ------------------------------------------------------------------------------------------------ configs


def benchmark_for(profile: str, dataset: str) -> str:
    """The dataset a paper dataset is trained on at ``profile``: the offline benchmark on smoke/quick."""
    return "synthetic" if profile in TOY_PROFILES else dataset


def stand_in(dataset: str) -> str:
    """The paper dataset whose printed cells a row of ``dataset`` faces (the benchmark faces CUB)."""
    return STAND_IN_DATASET.get(dataset, dataset)


def config(
    method: str, dataset: str, profile: str, *, overrides: Mapping[str, Any] | None = None, **options: Any
) -> Any:
    """``presets.get(method, dataset, profile, **options)`` with ``overrides`` (dotted keys) applied only where
    they change the preset, so an unchanged config hashes like the preset; its schedule checked."""
    from dmllab.training import presets

    cfg = presets.get(method, dataset, profile, **options)
    for key, value in (overrides or {}).items():
        if value is not None:
            cfg = cfg.replace(key, value)  # a value the preset already has leaves it equal, so hashed alike
    return presets.check(cfg)


def seeds_runs(cfg: Any, params: Params, variant: str, **tags: Any) -> list[Run]:
    """One :class:`Run` of ``cfg`` per seed of ``params``, labelled ``variant`` and tagged ``tags``; where it runs,
    on which draw of the benchmark included, is :func:`dmllab.experiments.lookup.place`'s."""
    return [Run(cfg, seed, variant=variant, tags=tuple(tags.items())) for seed in params.seeds]


def draw_of(params: Params, seed: int) -> int:
    """The benchmark draw that run seed ``seed`` trains on: ``seed`` itself where ``params.data_seed`` is
    ``"per_seed"`` (the default of smoke and quick), else the default draw 0."""
    return int(seed) if params.data_seed == "per_seed" else 0


def draw_in(cfg: Any) -> int:
    """The draw of the synthetic benchmark ``cfg`` trains on (0 for every other dataset)."""
    return int(cfg.data.dataset.get("seed", 0)) if cfg.data.dataset.name == "synthetic" else 0


def on_draw(cfg: Any, draw: int) -> Any:
    """``cfg`` on draw ``draw`` of the synthetic benchmark: the dataset's generation seed (other classes, other
    images, another pre-training pool; its caches are keyed on it) and, for the pre-trained SmallCNN, the trunk
    pre-trained once on that draw's pre-training pool (backbone keyword ``pretrain_seed``, which keys its weights
    and so the run). Draw 0 is the default: a config of draw 0 names no seed, so its hash is the one it always
    had. ``cfg`` itself when it is already on ``draw``.

    Raises:
        ValueError: a draw other than 0 of a dataset other than the synthetic benchmark.
    """
    if draw_in(cfg) == draw:
        return cfg
    if cfg.data.dataset.name != "synthetic":
        raise ValueError(
            f"a data draw redraws the synthetic benchmark; {cfg.dataset!r} has one draw (data_seed='fixed')"
        )
    dataset = cfg.data.dataset.without("seed")
    cfg = cfg.replace("data.dataset", dataset.with_kw(seed=int(draw)) if draw else dataset)
    m = cfg.model
    if m.backbone.name == "smallcnn" and m.pretrained and m.weights_path is None:
        trunk = m.backbone.without("pretrain_seed")
        cfg = cfg.replace("model.backbone", trunk.with_kw(pretrain_seed=int(draw)) if draw else trunk)
    return cfg


def over_seeds(
    fn: Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]],
    seeds: Sequence[int],
    table: str | None = None,
    **kwargs: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A toy for every seed: ``fn(seed=s, **kwargs)``; all rows, and the first seed's plot data as
    ``{table: frame}`` (:func:`dmllab.experiments.arrays.arrays_to_frame`)."""
    outs = [fn(seed=seed, **kwargs) for seed in seeds]
    rows = [row for r, _ in outs for row in r]
    plot = next((d for _, d in outs if d is not None), None)
    return rows, ({table: arrays_to_frame(plot or {})} if table else {})


# -------------------------------------------------------------------------------------- the untrained network


def evaluate_network(cfg: Any, *, seed: int) -> dict[str, float]:
    """Test metrics (fractions) of ``cfg``'s network as built, before any metric learning (pre-trained trunk,
    embedding layer initialised with ``seed``). The frozen-prefix feature cache (a speed device of training) is
    off: the network is the same function without it."""
    from dmllab.rng import seed_everything
    from dmllab.training import Trainer, build
    from dmllab.training.config import run_threads
    from dmllab.training.pretrain import prepare

    cfg = cfg.replace("data.feature_views", 0).replace("model.frozen_blocks", 0)
    prepare(cfg, progress=False)  # the pre-trained trunk it is built from
    with run_threads(cfg):  # the thread count of the run it stands for
        trainer = Trainer(cfg, progress=False, seed=seed)
        seed_everything(seed)
        trainer.model = build.build_model(cfg.model).to(trainer.device)
        return trainer.evaluate(cfg.data.test_split)


def untrained_rows(
    lookup: Any, cfg: Any, seeds: Sequence[int], pools: Sequence[str], *, variant: str, **labels: Any
) -> list[dict[str, Any]]:
    """Tidy test-metric rows of ``cfg``'s network as built (:func:`evaluate_network`) with each global pooling of
    ``pools``, per seed (column ``param_pool``), each seed's network placed as its runs are (``lookup.place``: on the
    seed's draw of the benchmark with that draw's pre-trained trunk): the pre-trained network without metric
    learning."""
    from dmllab.results import tidy

    out: list[dict[str, Any]] = []
    for pool in pools:
        pooled = cfg if cfg.model.pooling.name == pool else cfg.replace("model.pooling", pool)
        for seed in seeds:
            placed = lookup.place(Run(pooled, seed)).config
            metrics = evaluate_network(placed, seed=seed)
            out += tidy(metrics, variant=variant, dataset=cfg.dataset, seed=seed, pool=pool, **labels)
    return out
