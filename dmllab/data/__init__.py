"""Datasets (four real benchmarks, the offline synthetic benchmark, digits), sampling and transforms.

``build_dataset(name, root, split, transform=None, **kw)`` builds any registered dataset
(``list_datasets()``); ``ClassBalancedSampler`` makes the papers' class-balanced batches;
``build_transforms(preset, train)`` gives the papers' transform presets.
"""

from __future__ import annotations

from dmllab.data.base import (
    DATASETS,
    DatasetCountError,
    DatasetNotFoundError,
    ImageLoadError,
    RetrievalDataset,
    build_dataset,
    list_datasets,
)
from dmllab.data.digits import Digits
from dmllab.data.real import CUB200, SOP, Cars196, DuplicateImageIdError, IndexFileError, InShop, fingerprint
from dmllab.data.sampler import ClassBalancedSampler
from dmllab.data.synthetic import SyntheticFineGrained
from dmllab.data.transforms import TRANSFORMS, build_transforms, list_transforms

__all__ = [
    "CUB200",
    "DATASETS",
    "Digits",
    "SyntheticFineGrained",
    "SOP",
    "TRANSFORMS",
    "Cars196",
    "ClassBalancedSampler",
    "DatasetCountError",
    "DatasetNotFoundError",
    "DuplicateImageIdError",
    "ImageLoadError",
    "IndexFileError",
    "InShop",
    "RetrievalDataset",
    "build_dataset",
    "build_transforms",
    "fingerprint",
    "list_datasets",
    "list_transforms",
]
