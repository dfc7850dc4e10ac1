"""Malformed, truncated or duplicated index files get a named error with file and line; ``dmllab data check``
reports them; the dataset fingerprint follows the copy actually on disk."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest
from data_layouts import make_cub

from dmllab.data import CUB200, SOP, Cars196, DuplicateImageIdError, IndexFileError, InShop, fingerprint
from dmllab.data.cli import add_commands


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dmllab")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def _edit_line(path: Path, number: int, new: str | None) -> None:
    lines = path.read_text().splitlines()
    if new is None:
        del lines[number - 1]
    else:
        lines[number - 1] = new
    path.write_text("\n".join(lines) + "\n")


def test_duplicate_image_id_names_file_and_both_lines(cub_root: Path) -> None:
    labels = cub_root / "image_class_labels.txt"
    first = labels.read_text().splitlines()[0].split()[0]
    with labels.open("a") as fh:  # the same image under a second label
        fh.write(f"{first} 150\n")
    n = len(labels.read_text().splitlines())
    with pytest.raises(
        DuplicateImageIdError,
        match=rf"image_class_labels.txt, line {n}: image id {first} is already listed on line 1",
    ):
        CUB200(cub_root, "test", check_counts=False)
    assert issubclass(DuplicateImageIdError, IndexFileError) and issubclass(IndexFileError, ValueError)


def test_duplicate_image_path_in_images_txt(cub_root: Path) -> None:
    images = cub_root / "images.txt"
    rows = images.read_text().splitlines()
    rows[1] = f"{rows[1].split()[0]} {rows[0].split()[1]}"
    images.write_text("\n".join(rows) + "\n")
    with pytest.raises(DuplicateImageIdError, match="image path .* already listed on line 1"):
        CUB200(cub_root, "train", check_counts=False)


@pytest.mark.parametrize(
    ("file", "line", "new", "match"),
    [
        ("bounding_boxes.txt", 3, "3 1.0 2.0", r"bounding_boxes.txt, line 3: expected 5 columns"),
        (
            "image_class_labels.txt",
            2,
            "2 bird",
            r"image_class_labels.txt, line 2: class id 'bird' is not an integer",
        ),
        ("images.txt", 4, "four x.jpg", r"images.txt, line 4: image id 'four' is not an integer"),
        ("image_class_labels.txt", 5, None, r"image ids \[5\] of .*images.txt are missing from .*truncated"),
    ],
)
def test_malformed_cub_rows(cub_root: Path, file: str, line: int, new: str | None, match: str) -> None:
    _edit_line(cub_root / file, line, new)
    with pytest.raises(IndexFileError, match=match):
        CUB200(cub_root, "train", check_counts=False)


def test_sop_truncated_row_and_duplicate_across_files(sop_root: Path) -> None:
    train = sop_root / "Ebay_train.txt"
    original = train.read_text()
    _edit_line(train, 3, "2 1 2")  # the path column is missing
    with pytest.raises(IndexFileError, match=r"Ebay_train.txt, line 3: expected 4 columns"):
        SOP(sop_root, "train", check_counts=False)
    train.write_text(original)
    test_file = sop_root / "Ebay_test.txt"
    first_train_path = original.splitlines()[1].split()[3]
    with test_file.open("a") as fh:
        fh.write(f"999 11319 1 {first_train_path}\n")
    with pytest.raises(
        DuplicateImageIdError, match=r"Ebay_test.txt, line \d+: image path .*Ebay_train.txt, line 2"
    ):
        SOP(sop_root, "test", check_counts=False)


def test_inshop_truncated_and_malformed(inshop_root: Path) -> None:
    part = inshop_root / "Eval" / "list_eval_partition.txt"
    lines = part.read_text().splitlines()
    part.write_text("\n".join(lines[:-2]) + "\n")  # cut: fewer rows than the count line announces
    with pytest.raises(IndexFileError, match=r"line 1 announces \d+ images but \d+ are listed"):
        InShop(inshop_root, "query", check_counts=False)
    lines[4] = lines[4].replace("train", "trian")
    part.write_text("\n".join(lines) + "\n")
    with pytest.raises(IndexFileError, match=r"list_eval_partition.txt, line 5: expected"):
        InShop(inshop_root, "query", check_counts=False)


def test_cars_duplicate_annotation(tmp_path: Path) -> None:
    import numpy as np
    import scipy.io
    from data_layouts import make_cars

    root = make_cars(tmp_path / "cars")
    mat = scipy.io.loadmat(root / "cars_annos.mat")
    ann = mat["annotations"]
    ann[0, 1]["relative_im_path"] = ann[0, 0]["relative_im_path"]
    scipy.io.savemat(root / "cars_annos.mat", {"annotations": ann, "class_names": mat["class_names"]})
    with pytest.raises(DuplicateImageIdError, match="cars_annos.mat, line 2: image path"):
        Cars196(root, "train", check_counts=False)
    assert np.atleast_1d(ann).size  # the fixture really has annotations


def test_data_check_reports_a_malformed_index(cub_root: Path, capsys) -> None:
    _edit_line(cub_root / "bounding_boxes.txt", 2, "2 1.0")
    assert run_cli(["data", "check", "cub", str(cub_root), "--no-counts", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "INDEX:" in out and "bounding_boxes.txt, line 2" in out and "PROBLEMS FOUND" in out


def test_data_cli_errors_are_one_line(tmp_path: Path, capsys) -> None:
    assert run_cli(["data", "check", "sop", str(tmp_path / "nope"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dmllab: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_fingerprint_follows_the_copy_not_the_path(tmp_path: Path) -> None:
    a = make_cub(tmp_path / "a" / "CUB_200_2011")
    b = tmp_path / "b" / "CUB_200_2011"
    shutil.copytree(a, b)
    fa = fingerprint("cub", a)
    assert len(fa) == 16 and fingerprint("cub", b) == fa  # the same copy elsewhere
    some_image = next((b / "images").rglob("*.jpg"))
    some_image.write_bytes(some_image.read_bytes()[:50])  # a corrupted (truncated) image
    assert fingerprint("cub", b) != fa
    shutil.rmtree(b)
    shutil.copytree(a, b)
    next((b / "images").rglob("*.jpg")).unlink()  # a partial copy
    assert fingerprint("cub", b) != fa
    shutil.rmtree(b)
    shutil.copytree(a, b)
    _edit_line(b / "bounding_boxes.txt", 1, "1 0.0 0.0 1.0 1.0")  # another index
    assert fingerprint("cub", b) != fa
    with pytest.raises(ValueError, match="not a dataset read from a folder"):
        fingerprint("synthetic", None)
