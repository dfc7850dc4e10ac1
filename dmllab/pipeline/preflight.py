"""The check before a study trains (:func:`preflight`): what every run to train needs, checked once, so that the
study stops with one line per problem instead of failing every run alike.
"""

from __future__ import annotations

from dmllab.pipeline.plan import Plan


def preflight(plan: Plan) -> tuple[list[str], list[str]]:
    """What the runs to train need, checked once: ``(found, problems)``, one line each.

    * every real dataset's folder (:func:`dmllab.experiments.lookup.dataset_root` of the data root) holds its
      index files and, unless ``--no-counts``, the canonical counts: ``"data: cub at D/cub (11788 images)"``, or
      the loader's error (with how a data root serving several datasets is laid out);
    * every ImageNet weights file the runs load is in torchvision's cache, downloaded there first where possible
      (:func:`dmllab.models.weights.check_imagenet_weights`), or the one-line error naming the file and the folder.
    """
    from dmllab.data import DATASETS
    from dmllab.data.base import DatasetCountError, DatasetNotFoundError
    from dmllab.data.real import IndexFileError, is_real_dataset
    from dmllab.models.weights import MissingWeightsError, check_imagenet_weights, weights_source

    found: list[str] = []
    problems: list[str] = []
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
