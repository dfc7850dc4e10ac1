"""The check before a study trains (:func:`preflight`): what every run to train needs, checked once, so that the
study stops with one line per problem instead of failing every run alike.
"""

from __future__ import annotations

from pathlib import Path

from dmllab.pipeline.plan import Plan


def missing_notebooks(plan: Plan, notebooks: Path) -> list[str]:
    """One line per artifact of ``plan`` whose source notebook is not in ``notebooks`` (the study would train its
    runs and then fail on the notebook)."""
    return [
        f"notebook: {notebooks / f'{a.id}.ipynb'} is missing; write the notebooks with `dmllab notebooks`"
        for a in plan.artifacts
        if not (notebooks / f"{a.id}.ipynb").exists()
    ]


def untuned_runs(plan: Plan) -> list[str]:
    """One line per method whose missing runs would train without its tuned recipe on a profile whose presets read
    recipes (:func:`dmllab.training.presets.tuned.untuned`), unless every artifact reading them declares the method
    in its ``untuned`` (it studies the untuned preset on purpose)."""
    from dmllab.training.presets.tuned import untuned

    declared = {a.id: set(a.untuned) for a in plan.artifacts}
    lines: dict[str, str] = {}
    for r in plan.missing:
        cfg = r.run.config
        why = untuned(cfg)
        if why and not all(cfg.method in declared.get(aid, set()) for aid in r.artifacts):
            lines.setdefault(cfg.method, f"tuning: {why} (read by {', '.join(r.artifacts)})")
    return list(lines.values())


def benchmark_runs(plan: Plan) -> tuple[list[str], list[str]]:
    """``(found, problems)`` of the paper plan's runs on a stand-in of the papers' datasets (the offline benchmark):
    announced per artifact where it declares ``benchmark_on_paper``, a problem where it does not (a smoke artifact
    copied to the paper profile would add runs to the GPU hours unseen)."""
    from dmllab.experiments.artifact import STAND_IN_DATASET

    if plan.profile != "paper":
        return [], []
    declared = {a.id for a in plan.artifacts if a.benchmark_on_paper}
    counts: dict[str, int] = {}
    for r in plan.runs:
        if r.run.config.data.dataset.name in STAND_IN_DATASET:
            for aid in r.artifacts:
                counts[aid] = counts.get(aid, 0) + 1
    found = [
        f"benchmark: {a} trains {n} runs on the offline benchmark (declared)"
        for a, n in counts.items()
        if a in declared
    ]
    problems = [
        f"benchmark: {a} trains {n} paper-profile runs on the offline benchmark without declaring it "
        "(Artifact(benchmark_on_paper=True)), or its paper parameters should name the papers' datasets"
        for a, n in counts.items()
        if a not in declared
    ]
    return found, problems


def preflight(plan: Plan, notebooks: Path | None = None) -> tuple[list[str], list[str]]:
    """What the runs to train need, checked once: ``(found, problems)``, one line each: the source notebooks
    (:func:`missing_notebooks`, unless ``notebooks`` is None), :func:`untuned_runs`, :func:`benchmark_runs`, every
    real dataset's folder (its index files and, unless ``--no-counts``, canonical counts) and every ImageNet
    weights file in torchvision's cache (:func:`dmllab.models.weights.check_imagenet_weights`)."""
    from dmllab.data import DATASETS
    from dmllab.data.base import DatasetCountError, DatasetNotFoundError
    from dmllab.data.real import IndexFileError, is_real_dataset
    from dmllab.models.weights import MissingWeightsError, check_imagenet_weights, weights_source

    found, problems = benchmark_runs(plan)
    problems = (
        (missing_notebooks(plan, notebooks) if notebooks is not None else []) + untuned_runs(plan) + problems
    )
    configs = [r.run.config for r in plan.missing]
    datasets = ((c.data.dataset.name, c.data.root, c.data.dataset.get("check_counts", True)) for c in configs)
    for dataset, root, counts in dict.fromkeys(datasets):
        if not is_real_dataset(dataset):
            continue
        cls = DATASETS.get(dataset)
        try:
            sides = cls.index_records(root)
            if counts:
                cls(root, cls.splits[0], check_counts=True)
        except DatasetCountError as err:
            problems.append(
                f"data: {' '.join(str(err).split())} (dmllab study --no-counts reads a partial copy)"
            )
            continue
        except (DatasetNotFoundError, IndexFileError) as err:
            layout = (
                " (a data root serving several datasets holds one folder per dataset, named as "
                "`dmllab data fetch NAME D/NAME` makes them: D/cub, D/cars, D/sop, D/inshop)"
                if plan.execution.data_root is not None
                else " (give the datasets' folder with --data-root)"
            )
            problems.append(f"data: {' '.join(str(err).split())}{layout}")
            continue
        images = len({f for records in sides.values() for f, _ in records})
        found.append(
            f"data: {dataset} at {root} ({images} images{'' if counts else ', counts not checked (--no-counts)'})"
        )
    needed = {
        (c.model.backbone.name, c.model.backbone.kwargs)
        for c in configs
        if c.model.pretrained and c.model.weights_path is None
    }
    for backbone, kwargs in sorted(needed):
        try:
            if weights_source(backbone)[0] != "imagenet":
                continue
            found.append(
                f"weights: {backbone} ImageNet weights at {check_imagenet_weights(backbone, dict(kwargs))}"
            )
        except MissingWeightsError as err:
            problems.append(f"weights: {err}")
    return found, problems
