"""Class-disjoint folds of a split (the MLRC protocol's cross-validation, :mod:`dmllab.training.mlrc`).

A fold split is named ``"mlrc:<fold>of<folds>:train"`` or ``"...:val"`` (:func:`fold_split`): fold f's ``val``
part is block f of the ``trainval`` classes (contiguous class ids, :func:`class_folds`), its ``train`` part the
other blocks. :class:`dmllab.training.Trainer` resolves these names itself (``Trainer.dataset``), so a fold
model is an ordinary run of the run store whose ``data.train_split`` / ``data.val_split`` are fold splits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def class_folds(num_classes: int, folds: int) -> list[list[int]]:
    """Contiguous, class-disjoint blocks of the labels 0..num_classes-1 (sizes differ by at most one)."""
    if folds < 2 or folds > num_classes:
        raise ValueError(f"folds must be in [2, {num_classes}] for {num_classes} classes; got {folds}")
    bounds = [round(i * num_classes / folds) for i in range(folds + 1)]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(folds)]


def fold_split(fold: int, folds: int, part: str) -> str:
    """The split name of a fold: ``"mlrc:<fold>of<folds>:train"`` or ``...:val`` (folds counted from 0)."""
    if part not in ("train", "val"):
        raise ValueError(f"part must be 'train' or 'val'; got {part!r}")
    return f"mlrc:{fold}of{folds}:{part}"


def parse_fold_split(split: str) -> tuple[int, int, str] | None:
    """``(fold, folds, part)`` of a fold split name, None for any other split."""
    if not split.startswith("mlrc:"):
        return None
    _, spec, part = split.split(":")
    fold, folds = spec.split("of")
    return int(fold), int(folds), part


class ClassSubset:
    """The images of ``dataset`` whose label is in ``classes``, relabelled 0..len(classes)-1 in that order.

    Follows the dataset contract (``labels``, ``num_classes``, ``class_ids``, ``(image, label)`` items) and
    exposes ``images`` when the wrapped dataset has them (the in-memory data path).
    """

    def __init__(self, dataset: Any, classes: Sequence[int]) -> None:
        self.dataset = dataset
        remap = {int(c): i for i, c in enumerate(classes)}
        self.indices = [i for i, y in enumerate(dataset.labels) if int(y) in remap]
        self.labels = [remap[int(dataset.labels[i])] for i in self.indices]
        self.class_ids = [dataset.class_ids[c] for c in classes]
        self.split = f"{getattr(dataset, 'split', '?')}[{len(classes)} classes]"

    @property
    def num_classes(self) -> int:
        return len(self.class_ids)

    @property
    def images(self) -> Any:
        return self.dataset.images[self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image, _ = self.dataset[self.indices[index]]
        return image, self.labels[index]

    def __repr__(self) -> str:
        return f"ClassSubset({self.dataset!r}, images={len(self)}, classes={self.num_classes})"


def fold_classes(num_classes: int, fold: int, folds: int, part: str) -> list[int]:
    """The class labels of fold ``fold``'s ``part`` ("train": the other blocks, "val": block ``fold``)."""
    blocks = class_folds(num_classes, folds)
    if not 0 <= fold < folds:
        raise ValueError(f"fold must be in [0, {folds}); got {fold}")
    return blocks[fold] if part == "val" else [c for i, b in enumerate(blocks) if i != fold for c in b]
