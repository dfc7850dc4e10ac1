"""Datasets (four real benchmarks, the offline synthetic benchmark, digits), sampling and transforms.

``build_dataset(name, root, split, transform=None, **kw)`` builds any registered dataset
(``list_datasets()``); ``ClassBalancedSampler`` makes the papers' class-balanced batches;
``build_transforms(preset, train)`` gives the papers' transform presets.
"""

# ruff: noqa: F401 - the imports are the package's public names

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dmllab.data.base import (
    DATASETS,
    DatasetCountError,
    DatasetNotFoundError,
    ImageLoadError,
    RetrievalDataset,
)
from dmllab.data.digits import Digits
from dmllab.data.real import CUB200, SOP, Cars196, DuplicateImageIdError, IndexFileError, InShop, fingerprint
from dmllab.data.sampler import SAMPLERS, ClassBalancedSampler, RandomBatchSampler
from dmllab.data.synthetic import SyntheticFineGrained
from dmllab.data.transforms import TRANSFORMS, build_transforms


# Defined in the package, which imports (and so registers) every dataset module above.
def build_dataset(
    name: str, root: str | None, split: str, transform: Callable[[Any], Any] | None = None, **kwargs: Any
) -> RetrievalDataset:
    """Build a registered dataset by name (``list_datasets()``); ``root`` may be None for synthetic/digits."""
    return DATASETS.get(name)(root, split, transform=transform, **kwargs)


def input_fingerprint(spec: Any, root: str | None) -> str | None:
    """What the dataset of ``spec`` (a :class:`~dmllab.spec.Spec`) reads beyond its config, for a run key: the
    class's ``inputs(root, **kwargs)`` (the synthetic renderer's version, a real copy's fingerprint), or None."""
    inputs = getattr(DATASETS.get(spec.name), "inputs", None)
    return None if inputs is None else inputs(root, **spec.kw)


def list_datasets() -> list[str]:
    """Names accepted by :func:`build_dataset`, sorted."""
    return DATASETS.names()
