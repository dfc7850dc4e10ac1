"""scikit-learn digits with the dataset API (a closed-set classification dataset)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dmllab.data import build_dataset
from dmllab.data.digits import Digits, stratified_split


def test_shapes_and_value_ranges() -> None:
    d = Digits(split="all")
    assert len(d) == 1797 and d.num_classes == 10
    assert d.data.shape == (1797, 64) and d.data.dtype == np.float32
    assert d.data.min() == 0.0 and d.data.max() == 1.0
    assert d.images.shape == (1797, 8, 8) and d.images.dtype == np.uint8
    np.testing.assert_array_equal(d.images, np.round(d.data.reshape(-1, 8, 8) * 255))
    assert d.class_ids == list(range(10)) and d.class_names[3] == "3"


def test_train_test_are_a_stratified_partition() -> None:
    full = Digits(split="all")
    train, test = Digits(split="train"), Digits(split="test")
    assert len(train) + len(test) == len(full)
    assert set(train.labels) == set(test.labels) == set(range(10))  # closed set: same classes
    for c in range(10):
        n = full.labels.count(c)
        assert train.labels.count(c) == round(0.7 * n)
    # the two parts hold different images, together all of them
    rows = {r.tobytes() for r in train.data} | {r.tobytes() for r in test.data}
    assert len(rows) == len({r.tobytes() for r in full.data})


def test_split_is_deterministic_in_the_seed() -> None:
    assert np.array_equal(Digits(split="train", seed=1).data, Digits(split="train", seed=1).data)
    assert not np.array_equal(Digits(split="train", seed=1).data, Digits(split="train", seed=2).data)
    labels = np.repeat(np.arange(3), 10)
    a, b = stratified_split(labels, 0.7, seed=0)
    assert len(np.intersect1d(a, b)) == 0 and len(a) + len(b) == 30
    assert np.bincount(labels[a]).tolist() == [7, 7, 7]
    with pytest.raises(ValueError, match="fraction"):
        stratified_split(labels, 1.0, seed=0)


def test_items_are_pil_images() -> None:
    d = Digits(split="test")
    image, label = d[0]
    assert isinstance(image, Image.Image) and image.mode == "RGB" and image.size == (8, 8)
    assert label == d.labels[0]
    np.testing.assert_array_equal(np.asarray(image)[..., 0], d.images[0])
    grey, _ = Digits(split="test", image_mode="L")[0]
    assert grey.mode == "L"
    with pytest.raises(ValueError, match="image_mode"):
        Digits(split="test", image_mode="CMYK")


def test_registry_and_split_errors() -> None:
    d = build_dataset("digits", None, "test", transform=lambda im: np.asarray(im).mean())
    value, _ = d[0]
    assert isinstance(value, float)
    with pytest.raises(ValueError, match="valid splits"):
        Digits(split="val")
