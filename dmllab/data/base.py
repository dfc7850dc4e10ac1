"""The common dataset API: a retrieval dataset is a list of images with contiguous class labels.

Every dataset (the four real benchmarks, the offline synthetic benchmark, the digits) follows one contract:
``Cls(root, split, transform=None, ...)`` with attributes ``labels`` (one int per image, contiguous 0..C-1 within
the split, in the order of the original class ids), ``num_classes``, ``class_ids`` (the original ids or names,
``class_ids[label]``), and items ``(image, label)`` where ``image`` is a PIL image or ``transform(image)``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from torch.utils.data import Dataset

from dmllab.registry import Registry

#: Every dataset class by name; the builder supplies where the images are, the split and the transform.
DATASETS: Registry[type] = Registry("dataset", supplied=("root", "split", "transform", "progress"))

README_HINT = "`dmllab data fetch NAME ROOT` sets it up (docs/guide/datasets.md: where to get it, the layout)"


class DatasetNotFoundError(FileNotFoundError):
    """A dataset root or one of its index files is missing."""


class DatasetCountError(ValueError):
    """A dataset folder does not hold the canonical number of images or classes."""


class ImageLoadError(OSError):
    """An image listed in a dataset's index cannot be decoded."""


def validate_split(dataset_name: str, split: str, valid: Sequence[str]) -> str:
    """Return ``split`` if it is one of ``valid``; otherwise raise a ValueError listing the valid splits."""
    if split not in valid:
        raise ValueError(f"{dataset_name}: unknown split {split!r}; valid splits: {', '.join(valid)}")
    return split


def contiguous_labels(
    image_classes: Sequence[Hashable], class_order: Sequence[Hashable] | None = None
) -> tuple[list[int], list[Hashable]]:
    """Map original class ids to contiguous labels 0..C-1.

    Args:
        image_classes: the original class id of every image.
        class_order: the classes in label order; default: the distinct ids of ``image_classes`` sorted.
            Passing it lets two splits share one label map (In-Shop query and gallery).

    Returns ``(labels, class_ids)`` with ``class_ids[labels[i]] == image_classes[i]``."""
    class_ids = sorted(set(image_classes)) if class_order is None else list(class_order)
    index = {c: i for i, c in enumerate(class_ids)}
    missing = set(image_classes) - index.keys()
    if missing:
        raise ValueError(f"classes {sorted(missing)[:5]} are not in the given class order")
    return [index[c] for c in image_classes], class_ids


class RetrievalDataset(Dataset):
    """Base class: holds ``labels``/``class_ids``, validates the split and applies the transform.

    Subclasses set ``splits`` (the valid split names), fill ``self.labels`` and ``self.class_ids`` in their
    constructor (e.g. with :func:`contiguous_labels`) and implement ``_load(i) -> PIL.Image``.

    Args:
        split: one of ``type(self).splits``; anything else raises a ValueError listing them.
        transform: applied to the image returned by ``_load``.
    """

    splits: tuple[str, ...] = ()

    def __init__(self, split: str, transform: Callable[[Any], Any] | None = None) -> None:
        self.split = validate_split(type(self).__name__, split, type(self).splits)
        self.transform = transform
        self.labels: list[int] = []
        self.class_ids: list[Any] = []

    @property
    def num_classes(self) -> int:
        """Number of classes in this split (labels are 0..num_classes-1)."""
        return len(self.class_ids)

    def __len__(self) -> int:
        return len(self.labels)

    def _load(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement _load(index)")

    def __getitem__(self, index: int) -> tuple[Any, int]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"{type(self).__name__}: index {index} out of range for {len(self)} images")
        image = self._load(index)
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[index]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(split={self.split!r}, images={len(self)}, classes={self.num_classes})"
