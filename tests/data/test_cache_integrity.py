"""Caches carry a fingerprint of their content: the generated benchmark and the feature cache are checked when
opened and generated again when damaged; a dataset cache is compared with its source."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dmllab.data.synthetic import SyntheticFineGrained, ensure_cached, load_cached
from dmllab.fileio import CorruptFileError

SMALL = dict(num_classes=24, images_per_class=10, image_size=32, progress=False)


def _pool(root):
    return ensure_cached(
        "main", seed=0, image_size=32, num_classes=24, images_per_class=10, root=root, progress=False
    )


def test_the_generated_benchmark_records_fingerprints(tmp_path):
    folder = _pool(tmp_path)
    meta = json.loads((folder / "meta.json").read_text())
    assert set(meta["fingerprints"]) == {"images.npy", "class_ids.npy", "boxes.npy"}


@pytest.mark.parametrize("damage", ["zero", "flip", "truncate", "meta"])
def test_a_damaged_benchmark_is_generated_again(tmp_path, capsys, damage):
    good = SyntheticFineGrained(tmp_path, "train", **SMALL).images.copy()
    folder = _pool(tmp_path)
    if damage == "zero":  # the array zeroed in place, same shape
        images = np.load(folder / "images.npy", mmap_mode="r+")
        images[:] = 0
        images.flush()
        del images
    elif damage == "flip":
        raw = bytearray((folder / "images.npy").read_bytes())
        raw[-100] ^= 0x01
        (folder / "images.npy").write_bytes(bytes(raw))
    elif damage == "truncate":
        raw = (folder / "images.npy").read_bytes()
        (folder / "images.npy").write_bytes(raw[: len(raw) // 2])
    else:
        (folder / "meta.json").write_text("{")
    again = SyntheticFineGrained(tmp_path, "train", **SMALL)
    err = capsys.readouterr().err
    assert "dmllab: warning:" in err and str(folder) in err and "generating it again" in err
    np.testing.assert_array_equal(again.images, good)  # never trained on the damaged copy
    assert any(p.name.startswith("corrupt-main-") for p in tmp_path.iterdir())  # set aside, not deleted


def test_an_old_cache_gets_its_fingerprints_recorded(tmp_path):
    folder = _pool(tmp_path)
    meta = json.loads((folder / "meta.json").read_text())
    del meta["fingerprints"]
    (folder / "meta.json").write_text(json.dumps(meta))
    assert _pool(tmp_path) == folder
    assert "fingerprints" in json.loads((folder / "meta.json").read_text())


def test_a_damaged_array_names_its_file(tmp_path):
    folder = _pool(tmp_path)
    (folder / "boxes.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(CorruptFileError, match="boxes.npy"):
        load_cached(folder)


def test_a_damaged_feature_cache_is_computed_again(tmp_path, capsys):
    import torch

    from dmllab.data.tensor import FeatureCache

    ds = SyntheticFineGrained(tmp_path / "syn", "train", **SMALL)

    def prefix(x):
        return torch.nn.functional.avg_pool2d(x, 4)

    kw = dict(train=False, root=tmp_path / "features")
    first = FeatureCache(prefix, "digest", ds, "smoke", **kw)
    good = first.features.clone()
    file = first.folder / "features.npy"
    del first
    feats = np.load(file, mmap_mode="r+")
    feats[:] = 0
    feats.flush()
    del feats
    again = FeatureCache(prefix, "digest", ds, "smoke", **kw)
    assert again.build_seconds > 0 and torch.equal(again.features, good)
    assert "features.npy changed after it was written" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ dataset caches
def test_caching_another_source_into_a_cache_is_refused(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from data_layouts import make_cub, write_jpeg

    from dmllab.data.cache import DatasetCacheError, build_cache, check_cache
    from dmllab.data.check import check_dataset

    a = make_cub(tmp_path / "a" / "CUB_200_2011", size=(400, 300))
    b = make_cub(tmp_path / "b" / "CUB_200_2011", size=(400, 300))
    write_jpeg(next((b / "images").rglob("*.jpg")), size=(500, 300), seed=7)  # another source
    out = tmp_path / "cache"
    build_cache("cub", a, out, progress=False)
    assert build_cache("cub", a, out, progress=False) == out  # the same source again: resumed, fine
    with pytest.raises(DatasetCacheError, match="would mix the images of two sources"):
        build_cache("cub", b, out, progress=False)
    with pytest.raises(DatasetCacheError, match="another folder"):
        build_cache("cub", a, tmp_path / "a", progress=False)  # a non-empty folder without a manifest
    assert check_cache("cub", out) == []
    assert check_dataset("cub", out, check_counts=False, progress=False).ok
    # the source changes after the cache was built: the cache is stale
    write_jpeg(next((a / "images").rglob("*.jpg")), size=(500, 300), seed=9)
    report = check_dataset("cub", out, check_counts=False, progress=False)
    assert not report.ok and any("stale" in p for p in report.cache_problems)
    # the cache itself edited: refused when opened for a run
    from dmllab.data.real import fingerprint

    next((out / "images").rglob("*.jpg")).write_bytes(b"\xff\xd8 other image")
    with pytest.raises(DatasetCacheError, match="changed since it was built"):
        fingerprint("cub", out)


def test_an_empty_split_is_never_ok(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from data_layouts import make_sop

    from dmllab.data import SOP
    from dmllab.data.check import check_dataset
    from dmllab.data.real import EmptySplitError

    root = make_sop(tmp_path / "Stanford_Online_Products")
    (root / "Ebay_train.txt").write_text("image_id class_id super_class_id path\n")
    report = check_dataset("sop", root, check_counts=False, progress=False)
    assert not report.ok and any("split 'train' has no images" in e for e in report.split_errors)
    assert "SPLIT:" in report.summary()
    with pytest.raises(EmptySplitError, match="Ebay_train.txt"):
        SOP(root, "train", check_counts=False)


def test_count_error_names_the_options_that_exist(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from data_layouts import make_cub

    from dmllab.data import CUB200
    from dmllab.data.base import DatasetCountError
    from dmllab.training import apply_overrides, presets

    root = make_cub(tmp_path / "CUB_200_2011")
    with pytest.raises(DatasetCountError, match=r"--set data.dataset.check_counts=false \(dmllab train\)"):
        CUB200(root, "train")
    cfg = apply_overrides(presets.get("proxynca++", "cub", "smoke"), ["data.dataset.check_counts=false"])
    assert cfg.data.dataset.get("check_counts") is False  # the advice works
