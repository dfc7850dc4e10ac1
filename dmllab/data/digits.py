"""scikit-learn's bundled handwritten digits (1,797 images, 8x8 grey, 10 classes) with the dataset API.

This is a closed-set *classification* dataset: every split holds all ten digits, so train and test share their
classes (unlike the class-disjoint retrieval splits). It exists for the 2-D embedding figures (Heated-up
Softmax), where an MLP on the 64 pixel values is trained and its features plotted; it needs no download.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dmllab.data.base import DATASETS, RetrievalDataset

#: Fraction of every digit's images in the ``train`` split (the rest is ``test``).
TRAIN_FRACTION = 0.7


def stratified_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per class, shuffle the indices with ``seed`` and put the first ``round(fraction * n)`` in the first part.

    Returns the two index arrays, each sorted (so the images keep the dataset's order).
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    first, second = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cut = round(fraction * len(idx))
        first.append(idx[:cut])
        second.append(idx[cut:])
    return np.sort(np.concatenate(first)), np.sort(np.concatenate(second))


@DATASETS.register("digits")
class Digits(RetrievalDataset):
    """The scikit-learn digits as a dataset: items ``(PIL image 8x8, label)``.

    Args:
        root: unused (the data ships with scikit-learn); accepted for the common signature.
        split: ``train`` (a stratified ``TRAIN_FRACTION`` of every digit, chosen by ``seed``), ``test`` (the
            rest) or ``all``.
        transform: applied to the PIL image.
        seed: the seed of the stratified split.
        image_mode: ``"RGB"`` (default, so the usual image transforms apply) or ``"L"`` (grey).

    Attributes:
        data: float32 (N, 64) pixel values in [0, 1] (the original 0..16 scale divided by 16), for MLPs.
        images: uint8 (N, 8, 8) grey images (``round(255 * data)``).
        labels: the digit of every image; class_ids and class_names: the digits 0..9.
    """

    splits = ("train", "test", "all")

    def __init__(
        self,
        root: str | None = None,
        split: str = "train",
        transform: Callable[[Any], Any] | None = None,
        seed: int = 0,
        image_mode: str = "RGB",
    ) -> None:
        super().__init__(split, transform)
        if image_mode not in ("RGB", "L"):
            raise ValueError(f"image_mode must be 'RGB' or 'L', got {image_mode!r}")
        from sklearn.datasets import load_digits

        bunch = load_digits()
        targets = np.asarray(bunch.target, dtype=np.int64)
        if split == "all":
            index = np.arange(len(targets))
        else:
            train, test = stratified_split(targets, TRAIN_FRACTION, seed)
            index = train if split == "train" else test
        self.data: np.ndarray = (np.asarray(bunch.data, dtype=np.float32)[index] / 16.0).astype(np.float32)
        self.images: np.ndarray = np.round(self.data.reshape(-1, 8, 8) * 255.0).astype(np.uint8)
        self.labels = [int(t) for t in targets[index]]
        self.class_ids = list(range(10))
        self.class_names = [str(d) for d in range(10)]
        self.image_mode = image_mode
        self.seed = seed

    def _load(self, index: int) -> Any:
        from PIL import Image

        image = Image.fromarray(self.images[index])
        return image.convert("RGB") if self.image_mode == "RGB" else image
