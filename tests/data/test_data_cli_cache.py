"""``dmllab data check`` / ``dmllab data cache`` on the miniature layouts, and the cache round trip."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from data_layouts import make_cub, make_inshop
from PIL import Image

from dmllab.data import CUB200, InShop
from dmllab.data.cache import build_cache, resized_size
from dmllab.data.check import check_dataset
from dmllab.data.cli import add_commands


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dmllab")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.mark.parametrize("fixture", ["cub_root", "cars_root", "sop_root", "inshop_root"])
def test_check_passes_on_fixtures_without_counts(fixture: str, request, capsys) -> None:
    root = request.getfixturevalue(fixture)
    name = {"cub_root": "cub", "cars_root": "cars", "sop_root": "sop", "inshop_root": "inshop"}[fixture]
    assert run_cli(["data", "check", name, str(root), "--no-counts", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "trainval" in out and "failures: 0" in out and "OK" in out


def test_check_reports_counts_and_corrupt_images(cub_root: Path, capsys) -> None:
    assert run_cli(["data", "check", "cub", str(cub_root), "--quiet"]) == 1
    assert "expected 5864 images in 100 classes" in capsys.readouterr().out
    broken = CUB200(cub_root, "test", check_counts=False).image_path(2)
    broken.write_bytes(broken.read_bytes()[:40])  # truncated JPEG
    report = check_dataset("cub", cub_root, check_counts=False, progress=False)
    assert not report.ok and len(report.failures) == 1 and str(broken) in report.failures[0]
    assert report.images_checked == 17 and report.splits["test"] == (7, 3)
    assert run_cli(["data", "check", "cub", str(cub_root), "--no-counts", "--quiet"]) == 1
    assert str(broken) in capsys.readouterr().out


def test_check_missing_root_and_unknown_name(tmp_path: Path, capsys) -> None:
    assert run_cli(["data", "check", "sop", str(tmp_path / "nope"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert str(tmp_path / "nope") in err and "docs/guide/datasets.md" in err
    assert run_cli(["data", "check", "imagenet", str(tmp_path), "--quiet"]) == 1
    assert "valid dataset names" in capsys.readouterr().err


def test_resized_size_never_upscales() -> None:
    assert resized_size(500, 375, 288) == ((384, 288), 288 / 375)
    assert resized_size(200, 100, 288) == ((200, 100), 1.0)


def test_cache_round_trip(tmp_path: Path, monkeypatch, capsys) -> None:
    src = make_cub(tmp_path / "CUB_200_2011", size=(40, 30))
    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path / "cache"))
    assert run_cli(["data", "cache", "cub", str(src), "--shorter-side", "15", "--quiet"]) == 0
    out_root = tmp_path / "cache" / "datasets" / "cub-15"
    assert f"use root={out_root}" in capsys.readouterr().out
    for split in CUB200.splits:
        a, b = CUB200(src, split, check_counts=False), CUB200(out_root, split, check_counts=False)
        assert a.files == b.files and a.labels == b.labels and a.class_ids == b.class_ids
        np.testing.assert_allclose(b.boxes, a.boxes * 0.5, atol=0.06)  # 30 -> 15: every box halves
        image, _ = b[0]
        assert image.size == (20, 15)
    assert check_dataset("cub", out_root, check_counts=False, progress=False).ok
    with Image.open(next((out_root / "images").rglob("*.jpg"))) as img:
        assert img.format == "JPEG"


def test_cache_copies_small_images_unchanged_with_workers(tmp_path: Path) -> None:
    src = make_inshop(tmp_path / "In-shop")
    out = build_cache("inshop", src, tmp_path / "cached", shorter_side=288, workers=2, progress=False)
    a, b = InShop(src, "query", check_counts=False), InShop(out, "query", check_counts=False)
    assert a.files == b.files and a.labels == b.labels
    assert all(a.image_path(i).read_bytes() == b.image_path(i).read_bytes() for i in range(len(a)))
    assert (out / "dmllab_cache.json").is_file()
    with pytest.raises(ValueError, match="must differ"):
        build_cache("inshop", src, src, progress=False)


def test_through_dmllab_main(cub_root: Path, capsys) -> None:
    try:
        from dmllab.cli import build_parser

        build_parser()
    except ImportError as err:
        pytest.skip(f"the other CLI modules are not there yet: {err}")
    from dmllab.cli import main

    assert main(["data", "check", "cub", str(cub_root), "--no-counts", "--quiet"]) == 0
    assert "OK" in capsys.readouterr().out


def test_bare_data_command_prints_help(capsys) -> None:
    assert run_cli(["data"]) == 2
    assert "check" in capsys.readouterr().out
