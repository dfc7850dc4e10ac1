"""The offline fine-grained benchmark: splits, labels, determinism, the cache, boxes and class structure."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dmllab.data import build_dataset, synthetic
from dmllab.data.synthetic import (
    SPECIES_PER_GENUS,
    SyntheticFineGrained,
    ensure_cached,
    genus_params,
    load_cached,
    sample_grid,
    species_params,
)

SMALL = {"seed": 0, "image_size": 32, "num_classes": 8, "images_per_class": (6, 9), "num_pretrain_classes": 4}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("synthetic_cache")


def make(root: Path, split: str, **overrides) -> SyntheticFineGrained:
    return SyntheticFineGrained(root=root, split=split, progress=False, **{**SMALL, **overrides})


def digest(images: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest()


def test_splits_are_class_disjoint_with_cub_halves(root: Path) -> None:
    ds = {s: make(root, s) for s in SyntheticFineGrained.splits}
    assert ds["train"].class_ids == [0, 1]
    assert ds["val"].class_ids == [2, 3]
    assert ds["trainval"].class_ids == [0, 1, 2, 3]
    assert ds["test"].class_ids == [4, 5, 6, 7]
    assert len(ds["train"]) + len(ds["val"]) == len(ds["trainval"])
    main = load_cached(
        ensure_cached("main", root=root, seed=0, image_size=32, num_classes=8, images_per_class=(6, 9))
    )
    assert len(ds["trainval"]) + len(ds["test"]) == len(main["class_ids"])
    # pretrain / pretrain_val: the same classes of the other pool, ~80/20 of every class's images.
    assert ds["pretrain"].class_ids == ds["pretrain_val"].class_ids == [0, 1, 2, 3]
    for c in range(4):
        n_tr = ds["pretrain"].labels.count(c)
        n_va = ds["pretrain_val"].labels.count(c)
        assert 6 <= n_tr + n_va <= 9
        assert n_tr == round(0.8 * (n_tr + n_va))
    assert ds["pretrain"].class_names[0] == "pre_genus000"
    assert ds["test"].class_names[0] == "genus00_species04"


def test_images_per_class_in_range_and_labels_contiguous(root: Path) -> None:
    for split in ("train", "test", "pretrain"):
        d = make(root, split)
        counts = np.bincount(d.labels)
        assert counts.min() >= (1 if split == "pretrain" else 6) and counts.max() <= 9
        assert sorted(set(d.labels)) == list(range(d.num_classes))
        assert d.labels == sorted(d.labels)  # ordered by class id
        assert d.images.shape == (len(d), 32, 32, 3) and d.images.dtype == np.uint8
        assert d.boxes.shape == (len(d), 4)


def test_getitem_returns_pil_and_applies_transform(root: Path) -> None:
    d = make(root, "val")
    image, label = d[len(d) - 1]
    assert isinstance(image, Image.Image) and image.mode == "RGB" and image.size == (32, 32)
    assert label == d.labels[-1] == d.num_classes - 1
    np.testing.assert_array_equal(np.asarray(image), d.images[-1])
    shaped = make(root, "val", transform=lambda im: np.asarray(im).shape)
    assert shaped[0] == ((32, 32, 3), 0)
    with pytest.raises(IndexError):
        d[len(d)]


def test_deterministic_across_fresh_generations_and_processes(tmp_path: Path) -> None:
    kw = {"seed": 3, "image_size": 24, "num_classes": 4, "images_per_class": 3}
    a = load_cached(ensure_cached("main", root=tmp_path / "a", progress=False, **kw))
    b = synthetic.generate("main", progress=False, **kw)
    assert digest(a["images"]) == digest(b["images"])
    np.testing.assert_array_equal(a["boxes"], b["boxes"])
    code = (
        "import hashlib, numpy as np; from dmllab.data.synthetic import generate;"
        f"d = generate('main', progress=False, **{kw!r});"
        "print(hashlib.sha256(np.ascontiguousarray(d['images']).tobytes()).hexdigest())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == digest(a["images"])
    other = synthetic.generate("main", progress=False, **{**kw, "seed": 4})
    assert digest(other["images"]) != digest(a["images"])


def test_smaller_configuration_is_a_prefix(tmp_path: Path) -> None:
    big = synthetic.generate("main", image_size=24, num_classes=4, images_per_class=(3, 5), progress=False)
    small = synthetic.generate("main", image_size=24, num_classes=2, images_per_class=(3, 5), progress=False)
    n = len(small["class_ids"])
    np.testing.assert_array_equal(big["images"][:n], small["images"])
    np.testing.assert_array_equal(big["class_ids"][:n], small["class_ids"])


def test_second_construction_reuses_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = make(tmp_path, "train")
    folder = ensure_cached(
        "main", root=tmp_path, seed=0, image_size=32, num_classes=8, images_per_class=(6, 9)
    )
    mtime = (folder / "images.npy").stat().st_mtime_ns

    def no_generation(*args, **kwargs):
        raise AssertionError("the cache should have been reused")

    monkeypatch.setattr(synthetic, "generate", no_generation)
    second = make(tmp_path, "train")
    assert digest(first.images) == digest(second.images)
    assert (folder / "images.npy").stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]  # no temporary folder left behind
    with pytest.raises(AssertionError, match="reused"):  # another parameter set does need generating
        make(tmp_path, "train", seed=1)


def test_concurrent_generation_loses_the_race_gracefully(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If another process finishes the same cache while we generate, we keep theirs and clean up our copy."""
    real_generate = synthetic.generate
    kw = {"seed": 0, "image_size": 16, "num_classes": 4, "images_per_class": 2}

    def racing_generate(*args, **kwargs):
        monkeypatch.setattr(synthetic, "generate", real_generate)
        ensure_cached("main", root=tmp_path, progress=False, **kw)  # the "other process"
        return real_generate(*args, **kwargs)

    monkeypatch.setattr(synthetic, "generate", racing_generate)
    folder = ensure_cached("main", root=tmp_path, progress=False, **kw)
    assert (folder / "meta.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]
    assert len(load_cached(folder)["class_ids"]) == 8


def test_boxes_lie_inside_the_image_and_cover_the_object(root: Path) -> None:
    for split in ("trainval", "test", "pretrain"):
        d = make(root, split)
        x, y, w, h = d.boxes.T
        assert (x >= 0).all() and (y >= 0).all() and (w > 0).all() and (h > 0).all()
        assert (x + w <= 32).all() and (y + h <= 32).all()
    big = synthetic.generate("main", image_size=64, num_classes=4, images_per_class=20, progress=False)
    side = big["boxes"][:, 2:].max(axis=1) / 64
    assert 0.1 < side.min() and side.max() <= 1.0 and 0.3 < np.median(side) < 0.75


def test_pretrain_pool_is_disjoint_from_the_main_pool() -> None:
    main = np.stack([species_params(0, "main", c).vector() for c in range(40)])
    pre = np.stack([species_params(0, "pretrain", c).vector() for c in range(40)])
    dist = np.linalg.norm(main[:, None] - pre[None], axis=2)
    assert dist.min() > 1e-3
    assert genus_params(0, "main", 0) != genus_params(0, "pretrain", 0)


def test_species_of_a_genus_are_closer_than_species_of_different_genera() -> None:
    """The fine-grained structure: neighbouring classes differ subtly, genera differ a lot."""
    vecs = np.stack([species_params(0, "main", c).vector() for c in range(60)])
    vecs = (vecs - vecs.mean(0)) / (vecs.std(0) + 1e-9)
    genus = np.arange(60) // SPECIES_PER_GENUS
    dist = np.linalg.norm(vecs[:, None] - vecs[None], axis=2)
    same = genus[:, None] == genus[None]
    off_diag = ~np.eye(60, dtype=bool)
    # ~0.67 with the species spread of 2.5 sigmas (unstructured classes: ~1.0)
    assert dist[same & off_diag].mean() < 0.75 * dist[~same].mean()
    assert dist[same & off_diag].min() > 0  # but no two species are identical


def test_images_are_not_degenerate(root: Path) -> None:
    d = make(root, "trainval")
    labels = np.asarray(d.labels)
    images = d.images.astype(np.float32)
    means = []
    for c in range(d.num_classes):
        cls = images[labels == c]
        assert cls.std(axis=0).mean() > 5.0  # strong intra-class variation
        assert len({digest(im) for im in cls}) == len(cls)
        means.append(cls.mean(axis=0))
    # class means differ, and nothing is saturated to one colour
    assert min(np.abs(means[i] - means[j]).mean() for i in range(4) for j in range(i)) > 0.5
    assert 30 < images.mean() < 225


def test_invalid_arguments_raise_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="valid splits"):
        make(tmp_path, "validation")
    with pytest.raises(ValueError, match="even"):
        make(tmp_path, "train", num_classes=7)
    with pytest.raises(ValueError, match="images_per_class"):
        make(tmp_path, "train", images_per_class=(5, 2))
    with pytest.raises(ValueError, match="valid pools"):
        synthetic.generate("imagenet")


def test_registered_and_uses_the_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path))
    d = build_dataset(
        "synthetic", None, "test", num_classes=4, images_per_class=2, image_size=16, progress=False
    )
    assert d.num_classes == 2 and len(d) == 4
    assert len(list((tmp_path / "synthetic").glob("main-*/images.npy"))) == 1


def test_sample_grid_shape(root: Path) -> None:
    d = make(root, "trainval")
    grid = sample_grid(d, n_classes=3, per_class=4, pad=2)
    assert grid.dtype == np.uint8 and grid.shape == (3 * 34 + 2, 4 * 34 + 2, 3)
    first_tile = grid[2:34, 2:34]
    assert any(np.array_equal(first_tile, im) for im in d.images[np.asarray(d.labels) == 0])
