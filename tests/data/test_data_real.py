"""The real-benchmark loaders on miniature copies of their official layouts."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from data_layouts import (
    CARS_CLASSES,
    CUB_CLASSES,
    INSHOP_GALLERY,
    INSHOP_QUERY,
    INSHOP_TRAIN,
    SOP_TEST,
    SOP_TRAIN,
    make_cars,
)
from PIL import Image

from dmllab.data import (
    CUB200,
    SOP,
    Cars196,
    DatasetCountError,
    DatasetNotFoundError,
    ImageLoadError,
    InShop,
    build_dataset,
    list_datasets,
)


def _classes(ids: dict, lo: int, hi: int) -> list:
    return sorted(c for c in ids if lo <= c <= hi)


def _count(ids: dict, classes: list) -> int:
    return sum(ids[c] for c in classes)


def _assert_contiguous(ds) -> None:
    assert sorted(set(ds.labels)) == list(range(ds.num_classes))
    assert list(ds.class_ids) == sorted(ds.class_ids)  # label order = original class-id order


@pytest.mark.parametrize(
    ("cls", "fixture", "ids", "ranges"),
    [
        (
            CUB200,
            "cub_root",
            CUB_CLASSES,
            {"train": (1, 50), "val": (51, 100), "trainval": (1, 100), "test": (101, 200)},
        ),
        (
            Cars196,
            "cars_root",
            CARS_CLASSES,
            {"train": (1, 49), "val": (50, 98), "trainval": (1, 98), "test": (99, 196)},
        ),
    ],
)
def test_class_range_splits(cls, fixture, ids, ranges, request) -> None:
    root = request.getfixturevalue(fixture)
    for split, (lo, hi) in ranges.items():
        ds = cls(root, split, check_counts=False)
        expected = _classes(ids, lo, hi)
        assert ds.class_ids == expected
        assert len(ds) == _count(ids, expected)
        _assert_contiguous(ds)
        for i in range(len(ds)):  # each image's label maps back to its own class folder/annotation
            assert ds.class_ids[ds.labels[i]] in expected
    train, val, test = (cls(root, s, check_counts=False) for s in ("train", "val", "test"))
    assert not set(train.class_ids) & set(val.class_ids)
    assert not set(train.class_ids + val.class_ids) & set(test.class_ids)
    trainval = cls(root, "trainval", check_counts=False)
    assert sorted(trainval.files) == sorted(train.files + val.files)


def test_cub_labels_follow_image_class_labels(cub_root: Path) -> None:
    ds = CUB200(cub_root, "trainval", check_counts=False)
    for f, label in zip(ds.files, ds.labels):
        folder_class = int(Path(f).parent.name.split(".")[0])
        assert ds.class_ids[label] == folder_class
    assert ds.class_names[0] == "001.Bird_1"


def test_cub_bounding_boxes(cub_root: Path) -> None:
    ds = CUB200(cub_root, "test", check_counts=False)
    assert ds.boxes.shape == (len(ds), 4) and ds.boxes.dtype == np.float32
    image_id = {
        line.split()[1]: int(line.split()[0]) for line in (cub_root / "images.txt").read_text().splitlines()
    }
    for f, box in zip(ds.files, ds.boxes):
        i = image_id[f.removeprefix("images/")]
        np.testing.assert_allclose(box, [i + 0.5, 2 * i, 10.0 + i, 20.0])


def test_items_are_rgb_pil_images_and_transform_applies(cub_root: Path) -> None:
    ds = CUB200(cub_root, "train", check_counts=False)
    image, label = ds[0]
    assert isinstance(image, Image.Image) and image.mode == "RGB" and image.size == (8, 8)
    assert label == ds.labels[0]
    ds_t = CUB200(cub_root, "train", transform=lambda im: im.size, check_counts=False)
    assert ds_t[1] == ((8, 8), ds.labels[1])
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_cars_order_of_struct_array_does_not_matter(tmp_path: Path) -> None:
    a = Cars196(make_cars(tmp_path / "a", shuffle_seed=1), "trainval", check_counts=False)
    b = Cars196(make_cars(tmp_path / "b", shuffle_seed=2), "trainval", check_counts=False)
    assert a.files == b.files and a.labels == b.labels
    assert a.files == sorted(a.files) and a.files[0].startswith("car_ims/")
    assert a.class_names[:2] == ["Car model 1", "Car model 2"]


def test_sop_splits(sop_root: Path) -> None:
    expected = {
        "train": _classes(SOP_TRAIN, 1, 5659),
        "val": _classes(SOP_TRAIN, 5660, 11318),
        "trainval": sorted(SOP_TRAIN),
        "test": sorted(SOP_TEST),
    }
    for split, classes in expected.items():
        ds = SOP(sop_root, split, check_counts=False)
        assert ds.class_ids == classes
        assert len(ds) == _count({**SOP_TRAIN, **SOP_TEST}, classes)
        _assert_contiguous(ds)
        assert set(ds.super_class_ids) <= {1, 2, 3}


def test_inshop_splits_and_shared_query_gallery_labels(inshop_root: Path) -> None:
    items = sorted(INSHOP_TRAIN)
    train = InShop(inshop_root, "train", check_counts=False)
    val = InShop(inshop_root, "val", check_counts=False)
    trainval = InShop(inshop_root, "trainval", check_counts=False)
    assert train.class_ids == items[: len(items) // 2] and val.class_ids == items[len(items) // 2 :]
    assert trainval.class_ids == items and len(trainval) == sum(INSHOP_TRAIN.values())
    for ds in (train, val, trainval):
        _assert_contiguous(ds)
    query = InShop(inshop_root, "query", check_counts=False)
    gallery = InShop(inshop_root, "gallery", check_counts=False)
    union = sorted(set(INSHOP_QUERY) | set(INSHOP_GALLERY))
    assert query.class_ids == gallery.class_ids == union
    assert len(query) == sum(INSHOP_QUERY.values()) and len(gallery) == sum(INSHOP_GALLERY.values())
    for ds in (query, gallery):
        for f, label in zip(ds.files, ds.labels):
            assert ds.class_ids[label] == Path(f).parent.name  # the item folder
    shared = set(INSHOP_QUERY) & set(INSHOP_GALLERY)
    for item in shared:
        q = {lab for f, lab in zip(query.files, query.labels) if item in f}
        g = {lab for f, lab in zip(gallery.files, gallery.labels) if item in f}
        assert q == g and len(q) == 1
    assert not set(trainval.class_ids) & set(union)


@pytest.mark.parametrize(
    ("cls", "fixture", "expected"),
    [
        (CUB200, "cub_root", "expected 5864 images in 100 classes"),
        (Cars196, "cars_root", "expected 8054 images in 98 classes"),
        (SOP, "sop_root", "expected 60502 images in 11316 classes"),
        (InShop, "inshop_root", "expected 14218 images, found 5 images"),
    ],
)
def test_check_counts_names_expected_and_found(cls, fixture, expected, request) -> None:
    root = request.getfixturevalue(fixture)
    with pytest.raises(DatasetCountError, match="found") as err:
        cls(root, cls.splits[0])
    assert expected in str(err.value)
    assert "check_counts=False" in str(err.value)


def test_missing_root_names_path_layout_and_the_datasets_guide(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetNotFoundError) as err:
        CUB200(missing, "train")
    msg = str(err.value)
    assert str(missing) in msg and "images.txt" in msg and "docs/guide/datasets.md" in msg
    with pytest.raises(FileNotFoundError, match="cars_annos.mat"):
        Cars196(None, "train")


@pytest.mark.parametrize("index_file", ["Ebay_test.txt"])
def test_missing_index_file(sop_root: Path, index_file: str) -> None:
    (sop_root / index_file).unlink()
    with pytest.raises(DatasetNotFoundError) as err:
        SOP(sop_root, "train", check_counts=False)
    assert str(sop_root / index_file) in str(err.value) and "docs/guide/datasets.md" in str(err.value)


def test_corrupt_and_missing_images_name_the_file(cub_root: Path) -> None:
    ds = CUB200(cub_root, "train", check_counts=False)
    broken = ds.image_path(0)
    broken.write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    with pytest.raises(ImageLoadError, match=str(broken)):
        ds[0]
    gone = ds.image_path(1)
    gone.unlink()
    with pytest.raises(ImageLoadError, match=f"missing: {gone}"):
        ds[1]


def test_unknown_split_lists_valid_ones(inshop_root: Path) -> None:
    with pytest.raises(ValueError, match="valid splits: train, val, trainval, query, gallery"):
        InShop(inshop_root, "test", check_counts=False)


def test_registry_and_build_dataset(sop_root: Path) -> None:
    assert {"cub", "cars", "sop", "inshop"} <= set(list_datasets())
    ds = build_dataset("sop", sop_root, "test", check_counts=False)
    assert isinstance(ds, SOP) and len(ds) == sum(SOP_TEST.values())
    with pytest.raises(KeyError, match="valid dataset names"):
        build_dataset("imagenet", sop_root, "test")


def test_loader_ignores_stray_files_and_uses_index_only(cub_root: Path) -> None:
    extra = cub_root / "images" / "001.Bird_1" / "unlisted.jpg"
    shutil.copy(next((cub_root / "images" / "001.Bird_1").glob("*.jpg")), extra)
    ds = CUB200(cub_root, "trainval", check_counts=False)
    assert all(f.endswith(".jpg") for f in ds.files) and "images/001.Bird_1/unlisted.jpg" not in ds.files
