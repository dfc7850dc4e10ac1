"""Miniature copies of the four real benchmarks in their official on-disk layouts, quirks included.

Class ids are chosen inside the official split ranges (CUB train 1-50 / val 51-100 / test 101-200, Cars
1-49 / 50-98 / 99-196, SOP train <= 5659 < val) so the real split rules apply unchanged.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from PIL import Image


def write_jpeg(path: Path, size: tuple[int, int] = (8, 8), seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path, format="JPEG")


def add_stray_files(folder: Path) -> None:
    """Files a real download or a Mac leaves inside image folders; the loaders must ignore them."""
    (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (folder / "README").write_text("not an image\n")


# (class id, number of images) of each miniature dataset
CUB_CLASSES = {1: 3, 2: 2, 51: 2, 52: 3, 101: 2, 102: 2, 150: 3}
CARS_CLASSES = {1: 2, 2: 3, 50: 2, 98: 2, 99: 3, 196: 2}
SOP_TRAIN = {1: 2, 2: 3, 5660: 2, 5661: 2}
SOP_TEST = {11319: 2, 11320: 3, 22634: 2}


def make_cub(root: Path, size: tuple[int, int] = (8, 8)) -> Path:
    """CUB_200_2011 layout; image ids interleave the classes so file order differs from class order."""
    root.mkdir(parents=True)
    entries = [(c, k) for c, n in CUB_CLASSES.items() for k in range(n)]
    random.Random(0).shuffle(entries)
    images, labels, boxes = [], [], []
    for image_id, (c, k) in enumerate(entries, start=1):
        rel = f"{c:03d}.Bird_{c}/Bird_{c}_{k:04d}_{image_id}.jpg"
        write_jpeg(root / "images" / rel, size, seed=image_id)
        images.append(f"{image_id} {rel}")
        labels.append(f"{image_id} {c}")
        boxes.append(f"{image_id} {image_id + 0.5} {2 * image_id}.0 {10.0 + image_id} 20.0")
    (root / "images.txt").write_text("\n".join(images) + "\n")
    (root / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (root / "bounding_boxes.txt").write_text("\n".join(boxes) + "\n")
    (root / "classes.txt").write_text("".join(f"{c} {c:03d}.Bird_{c}\n" for c in sorted(CUB_CLASSES)))
    (root / "train_test_split.txt").write_text("".join(f"{i} 1\n" for i in range(1, len(entries) + 1)))
    add_stray_files(root / "images")
    add_stray_files(root / "images" / "001.Bird_1")
    return root


def make_cars(root: Path, shuffle_seed: int = 0) -> Path:
    """Cars196 layout: cars_annos.mat holds a struct array in shuffled order, paths car_ims/000001.jpg."""
    import scipy.io

    root.mkdir(parents=True)
    entries = [c for c, n in CARS_CLASSES.items() for _ in range(n)]
    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    annotations = np.zeros((1, len(entries)), dtype=[(f, "O") for f in fields])
    order = list(range(len(entries)))
    random.Random(shuffle_seed).shuffle(order)
    for slot, i in enumerate(order):
        rel = f"car_ims/{i + 1:06d}.jpg"
        write_jpeg(root / rel, seed=100 + i)
        values = [rel, 1, 2, 7, 6, entries[i], (i + slot) % 2]  # the test flag is noise: it must be ignored
        for f, v in zip(fields, values):
            annotations[0, slot][f] = v if isinstance(v, str) else np.uint8(v)
    names = np.empty((1, 196), dtype=object)
    for c in range(1, 197):
        names[0, c - 1] = f"Car model {c}"
    scipy.io.savemat(root / "cars_annos.mat", {"annotations": annotations, "class_names": names})
    add_stray_files(root / "car_ims")
    return root


def _ebay(rows: list[tuple[int, int, int, str]]) -> str:
    return "image_id class_id super_class_id path\n" + "".join(f"{i} {c} {s} {p}\n" for i, c, s, p in rows)


def make_sop(root: Path) -> Path:
    root.mkdir(parents=True)
    image_id = 0
    for fname, classes in (("Ebay_train.txt", SOP_TRAIN), ("Ebay_test.txt", SOP_TEST)):
        rows = []
        for c, n in classes.items():
            superclass = 1 + c % 3
            cat = ["bicycle", "cabinet", "chair"][superclass - 1]
            for k in range(n):
                image_id += 1
                rel = f"{cat}_final/{1000 + c}_{k}.JPG"
                write_jpeg(root / rel, seed=200 + image_id)
                rows.append((image_id, c, superclass, rel))
        (root / fname).write_text(_ebay(rows))
    (root / "Ebay_info.txt").write_text("image_id class_id super_class_id path\n")
    add_stray_files(root / "bicycle_final")
    return root


# In-Shop: training items, query/gallery items (gallery has an item query lacks and vice versa)
INSHOP_TRAIN = {"id_00000001": 2, "id_00000004": 3, "id_00000007": 2, "id_00000010": 2, "id_00000012": 1}
INSHOP_QUERY = {"id_00000002": 2, "id_00000005": 1, "id_00000008": 2}
INSHOP_GALLERY = {"id_00000008": 1, "id_00000002": 2, "id_00000009": 1}


def make_inshop(root: Path) -> Path:
    """In-Shop layout: a count line, a header line, whitespace-aligned columns."""
    root.mkdir(parents=True)
    rows = []
    for status, items in (("train", INSHOP_TRAIN), ("query", INSHOP_QUERY), ("gallery", INSHOP_GALLERY)):
        for item, n in items.items():
            for k in range(n):
                rel = f"img/WOMEN/Dresses/{item}/{k + 1:02d}_{status[0]}_front.jpg"
                write_jpeg(root / rel, seed=300 + len(rows))
                rows.append((rel, item, status))
    width = max(len(r[0]) for r in rows) + 8
    lines = [str(len(rows)), "image_name item_id evaluation_status"]
    lines += [f"{rel:<{width}}{item:<16}{status}" for rel, item, status in rows]
    (root / "Eval").mkdir()
    (root / "Eval" / "list_eval_partition.txt").write_text("\n".join(lines) + "\n")
    add_stray_files(root / "img" / "WOMEN" / "Dresses" / "id_00000001")
    return root
