"""Image paths of the index files stay inside the dataset root; CUB's boxes are real boxes; CUB file names may
hold spaces.

Each case edits a miniature dataset in its real layout (data_layouts.py): an image path with ``..``, an absolute
one or another spelling of a listed one must fail with the file and the line, in the loaders, in ``dmllab data
check`` and in ``dmllab data cache`` (which then writes nothing, inside its ``--out`` or outside).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from data_layouts import make_cars, make_cub, make_inshop, make_sop, write_jpeg
from test_data_index_errors import run_cli

from dmllab.data import CUB200, SOP, Cars196, IndexFileError, InShop
from dmllab.data.cache import build_cache
from dmllab.data.index import image_relpath


def _replace_line(path: Path, number: int, change) -> str:
    lines = path.read_text().splitlines()
    lines[number - 1] = change(lines[number - 1])
    path.write_text("\n".join(lines) + "\n")
    return lines[number - 1]


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("../../x.jpg", "has a '..' part"),
        ("img/../../x.jpg", "has a '..' part"),
        ("/etc/x.jpg", "is absolute"),
        ("./img/x.jpg", "another spelling of 'img/x.jpg'"),
        ("img/./x.jpg", "another spelling of 'img/x.jpg'"),
        ("img//x.jpg", "another spelling of 'img/x.jpg'"),
        ("img/x.jpg/", "another spelling of 'img/x.jpg'"),
        ("", "is empty"),
    ],
)
def test_image_relpath_refuses_what_is_not_a_plain_relative_path(value, match):
    with pytest.raises(IndexFileError, match=match):
        image_relpath(value, "list.txt, line 7")
    assert image_relpath("img/WOMEN/a b.jpg", "x") == "img/WOMEN/a b.jpg"


def _outside_image(tmp_path: Path) -> Path:
    outside = tmp_path / "outside" / "x.jpg"
    write_jpeg(outside, seed=99)
    return outside


@pytest.mark.parametrize("kind", ["dotdot", "absolute"])
def test_inshop_path_outside_the_root_is_refused_by_loader_check_and_cache(kind, tmp_path, capsys):
    root = make_inshop(tmp_path / "data" / "In-shop")
    outside = _outside_image(tmp_path)
    part = root / "Eval" / "list_eval_partition.txt"
    bad = "../../outside/x.jpg" if kind == "dotdot" else str(outside)
    assert (root / bad).resolve() == outside.resolve()  # the path really names the outside image
    _replace_line(part, 5, lambda line: line.replace(line.split()[0], bad, 1))
    match = rf"list_eval_partition.txt, line 5: image path '{bad}' (has a '\.\.' part|is absolute)"
    with pytest.raises(IndexFileError, match=match):
        InShop(root, "trainval", check_counts=False)
    assert run_cli(["data", "check", "inshop", str(root), "--no-counts", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "INDEX:" in out and "list_eval_partition.txt, line 5" in out and "PROBLEMS FOUND" in out
    cache = tmp_path / "cache" / "out"
    assert run_cli(["data", "cache", "inshop", str(root), "--out", str(cache), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "line 5" in err and "\n" not in err.strip()
    assert not (tmp_path / "cache").exists()  # nothing written, inside --out or beside it
    assert sorted(p.name for p in outside.parent.iterdir()) == ["x.jpg"]


def test_a_query_listed_again_as_gallery_under_another_spelling_is_caught(tmp_path, capsys):
    root = make_inshop(tmp_path / "In-shop")
    part = root / "Eval" / "list_eval_partition.txt"
    lines = part.read_text().splitlines()
    number = next(n for n, line in enumerate(lines, start=1) if line.endswith("gallery"))
    query = next(line for line in lines if line.endswith("query")).split()
    alias = query[0].replace("/Dresses/", "/./Dresses/")
    _replace_line(part, number, lambda line: f"{alias}  {query[1]}  gallery")
    with pytest.raises(IndexFileError, match=rf"line {number}: image path '{alias}' is another spelling"):
        InShop(root, "gallery", check_counts=False)
    assert run_cli(["data", "check", "inshop", str(root), "--no-counts", "--quiet"]) == 1
    assert f"line {number}" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["../x.JPG", "/x.JPG", "bicycle_final/./1001_0.JPG"])
def test_sop_path_outside_or_aliased_is_refused(bad, tmp_path):
    root = make_sop(tmp_path / "Stanford_Online_Products")
    _replace_line(root / "Ebay_test.txt", 3, lambda line: " ".join([*line.split()[:3], bad]))
    with pytest.raises(IndexFileError, match=r"Ebay_test.txt, line 3: image path"):
        SOP(root, "test", check_counts=False)


@pytest.mark.parametrize("bad", ["../../x.jpg", "/x.jpg", "car_ims/./000001.jpg"])
def test_cars_path_outside_or_aliased_is_refused(bad, tmp_path):
    import scipy.io

    root = make_cars(tmp_path / "cars")
    mat = scipy.io.loadmat(root / "cars_annos.mat")
    ann = mat["annotations"]
    ann[0, 2]["relative_im_path"] = np.array([bad])
    scipy.io.savemat(root / "cars_annos.mat", {"annotations": ann, "class_names": mat["class_names"]})
    with pytest.raises(IndexFileError, match=r"cars_annos.mat, annotation 3: image path"):
        Cars196(root, "train", check_counts=False)


@pytest.mark.parametrize("bad", ["../../outside/x.jpg", "/outside/x.jpg", "./001.Bird_1/x.jpg"])
def test_cub_path_outside_or_aliased_is_refused(bad, tmp_path):
    root = make_cub(tmp_path / "CUB_200_2011")
    _replace_line(root / "images.txt", 4, lambda line: f"{line.split()[0]} {bad}")
    with pytest.raises(IndexFileError, match=r"images.txt, line 4: image path"):
        CUB200(root, "train", check_counts=False)


@pytest.mark.parametrize(
    ("box", "what"),
    [
        ("1.0 2.0 -5.0 3.0", "negative width"),
        ("1.0 2.0 5.0 0.0", "zero height"),
        ("1.0 2.0 nan 3.0", "NaN"),
        ("1.0 inf 5.0 3.0", "infinite"),
    ],
)
def test_cub_boxes_must_be_finite_with_positive_area(box, what, tmp_path, capsys):
    root = make_cub(tmp_path / "CUB_200_2011")
    _replace_line(root / "bounding_boxes.txt", 3, lambda line: f"{line.split()[0]} {box}")
    with pytest.raises(IndexFileError, match=r"bounding_boxes.txt, line 3: box .* positive width and height"):
        CUB200(root, "test", check_counts=False)
    assert run_cli(["data", "check", "cub", str(root), "--no-counts", "--quiet"]) == 1
    assert "bounding_boxes.txt, line 3" in capsys.readouterr().out


def test_cub_image_without_a_box_is_named(tmp_path):
    root = make_cub(tmp_path / "CUB_200_2011")
    boxes = root / "bounding_boxes.txt"
    lines = boxes.read_text().splitlines()
    boxes.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(IndexFileError, match=rf"image ids \[{len(lines)}\] .* missing from .*bounding_boxes"):
        CUB200(root, "test", check_counts=False)


def test_a_cub_file_name_with_a_space_is_read_whole(tmp_path, capsys):
    """images.txt is ``<image id> <path>``: only the first whitespace separates the columns."""
    root = make_cub(tmp_path / "CUB_200_2011", size=(40, 30))
    line = _replace_line(root / "images.txt", 2, lambda line: line)
    image_id, rel = line.split(" ", 1)
    spaced = rel.replace(".jpg", " copy 2.jpg")
    (root / "images" / rel).rename(root / "images" / spaced)
    _replace_line(root / "images.txt", 2, lambda line: f"{image_id} {spaced}")
    everything = [f for split in ("trainval", "test") for f in CUB200(root, split, check_counts=False).files]
    assert f"images/{spaced}" in everything
    assert run_cli(["data", "check", "cub", str(root), "--no-counts", "--quiet"]) == 0
    assert "OK" in capsys.readouterr().out
    cache = build_cache("cub", root, tmp_path / "cache", shorter_side=15, progress=False)
    assert (cache / "images" / spaced).is_file()
    split = "trainval" if f"images/{spaced}" in CUB200(root, "trainval", check_counts=False).files else "test"
    a, b = CUB200(root, split, check_counts=False), CUB200(cache, split, check_counts=False)
    assert a.files == b.files
    np.testing.assert_allclose(b.boxes, a.boxes * 0.5, atol=0.06)  # 30 -> 15: every box halves, this one too
