"""The four real benchmarks: CUB200-2011, Cars196, Stanford Online Products and In-Shop Clothes.

Each loader reads the dataset's official index files (never a directory walk, so stray files such as
``.DS_Store`` or a README inside an image folder are ignored) and builds the class-disjoint splits used by
ProxyNCA++ and the other papers (../shared/notes/official-code.md):

======== ===================== ===================== ===================== ==========================
dataset  train                 val                   trainval              test
======== ===================== ===================== ===================== ==========================
CUB200   classes 1-50          51-100                1-100                 101-200
Cars196  classes 1-49          50-98                 1-98                  99-196
SOP      Ebay_train, 1-5659    Ebay_train, 5660+     Ebay_train.txt        Ebay_test.txt
InShop   first half of items   second half           official ``train``    ``query`` / ``gallery``
======== ===================== ===================== ===================== ==========================

Class ids above are the datasets' own 1-based ids; the papers' 0-based ids are these minus one (CUB train
0-49, ...). Cars196 splits by class id, never by the ``test`` flag of ``cars_annos.mat`` (that flag is the
classification split, which shares classes). Labels are contiguous 0..C-1 within a split, in the order of
the original class ids. In-Shop has no official train/val division: ``train`` holds the first
``n_items // 2`` training items in sorted item-id order and ``val`` the rest. In ``query`` and ``gallery`` an
item has the same label: both use one label map over the sorted union of the query and gallery items.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from dmllab.data.base import (
    DATASETS,
    README_HINT,
    DatasetCountError,
    DatasetNotFoundError,
    ImageLoadError,
    RetrievalDataset,
    contiguous_labels,
)

Record = tuple[str, Hashable]  # (image path relative to the dataset root, original class id)


def load_image(path: Path) -> Image.Image:
    """Decode an RGB image; a missing or undecodable file raises :class:`ImageLoadError` naming it."""
    try:
        with Image.open(path) as img:
            return img.convert("RGB")  # convert() forces the full decode inside the try
    except FileNotFoundError:
        raise ImageLoadError(f"image file is missing: {path}") from None
    except (OSError, ValueError, SyntaxError) as err:  # PIL raises these on truncated or corrupt data
        raise ImageLoadError(f"cannot decode image {path}: {err}") from err


def read_table(path: Path, skip: int = 0) -> list[list[str]]:
    """Whitespace-separated rows of a text index file, after ``skip`` header lines, blank lines dropped."""
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()[skip:]
    return [line.split() for line in lines if line.strip()]


class ImageFileDataset(RetrievalDataset):
    """A real benchmark on disk: images listed by index files under ``root``.

    Subclasses declare the layout (``index_files``, ``layout``), the canonical counts (``canonical_counts``:
    side -> (images, classes or None)), the splits, and implement ``_read_sides`` (index -> records per side)
    and ``_select`` (split -> records and optional class order).

    Args:
        root: the extracted dataset folder (see ``layout``); a pre-resized cache from ``dmllab data cache``
            works as well, since it keeps the layout and the index files.
        split: one of ``splits``.
        transform: applied to the PIL image.
        check_counts: verify the canonical image and class counts of the whole index (not only of the split).
    """

    layout: str = ""
    index_files: tuple[str, ...] = ()
    canonical_counts: dict[str, tuple[int, int | None]] = {}
    check_splits: tuple[str, ...] = ()  # splits that together cover every image (used by check and cache)

    def __init__(
        self,
        root: str | Path | None,
        split: str,
        transform: Callable[[Any], Any] | None = None,
        check_counts: bool = True,
    ) -> None:
        super().__init__(split, transform)
        self.root = self._check_root(root)
        sides = self._read_sides()
        if check_counts:
            self._check_counts(self._count_sides(sides))
        records, class_order = self._select(sides, split)
        self.files: list[str] = [f for f, _ in records]
        self.labels, self.class_ids = contiguous_labels([c for _, c in records], class_order)

    # -- layout -------------------------------------------------------------------------------------------
    def _check_root(self, root: str | Path | None) -> Path:
        name = type(self).__name__
        if root is None:
            raise DatasetNotFoundError(f"{name}: no root given. Expected {self.layout}; {README_HINT}")
        root = Path(root).expanduser()
        if not root.is_dir():
            raise DatasetNotFoundError(
                f"{name}: dataset root {root} does not exist. Expected {self.layout}; {README_HINT}"
            )
        for rel in self.index_files:
            if not (root / rel).is_file():
                raise DatasetNotFoundError(
                    f"{name}: index file {root / rel} is missing. Expected {self.layout}; {README_HINT}"
                )
        return root

    def _read_sides(self) -> dict[str, list[Record]]:
        raise NotImplementedError

    def _select(self, sides: dict[str, list[Record]], split: str) -> tuple[list[Record], list | None]:
        raise NotImplementedError

    def _count_sides(self, sides: dict[str, list[Record]]) -> dict[str, list[Record]]:
        """The record groups whose sizes ``canonical_counts`` describes (default: the sides themselves)."""
        return sides

    def _check_counts(self, sides: dict[str, list[Record]]) -> None:
        problems = []
        for side, (n_images, n_classes) in self.canonical_counts.items():
            records = sides.get(side, [])
            found_images, found_classes = len(records), len({c for _, c in records})
            if found_images != n_images or (n_classes is not None and found_classes != n_classes):
                expected = f"{n_images} images" + (
                    f" in {n_classes} classes" if n_classes is not None else ""
                )
                problems.append(
                    f"{side}: expected {expected}, found {found_images} images in {found_classes} classes"
                )
        if problems:
            raise DatasetCountError(
                f"{type(self).__name__} at {self.root} does not have the canonical counts ("
                + "; ".join(problems)
                + "). Pass check_counts=False (or --no-counts) to use a partial copy; "
                + README_HINT
            )

    # -- items --------------------------------------------------------------------------------------------
    def image_path(self, index: int) -> Path:
        """Absolute path of image ``index``."""
        return self.root / self.files[index]

    def _load(self, index: int) -> Image.Image:
        return load_image(self.image_path(index))

    def cache_scale_hook(self, dst_root: Path, scales: dict[str, float]) -> None:
        """Rewrite index files that hold pixel coordinates after images were rescaled (default: none)."""


def _by_class_range(records: list[Record], lo: int, hi: int) -> list[Record]:
    return [r for r in records if lo <= int(r[1]) <= hi]


class _ClassRangeDataset(ImageFileDataset):
    """CUB and Cars: one index, splits are ranges of the 1-based class id."""

    splits = ("train", "val", "trainval", "test")
    check_splits = ("trainval", "test")
    class_ranges: dict[str, tuple[int, int]] = {}

    def _select(self, sides: dict[str, list[Record]], split: str) -> tuple[list[Record], list | None]:
        lo, hi = self.class_ranges[split]
        return _by_class_range(sides["trainval"] + sides["test"], lo, hi), None

    def _sides_from(self, records: list[Record]) -> dict[str, list[Record]]:
        return {s: _by_class_range(records, *self.class_ranges[s]) for s in ("trainval", "test")}


@DATASETS.register("cub")
class CUB200(_ClassRangeDataset):
    """Caltech-UCSD Birds-200-2011: 11,788 images of 200 bird species (ProxyNCA++ Sec. 5; 0-based train 0-49,
    val 50-99, test 100-199).

    Extra attributes: ``boxes`` (float32 (N, 4) ``x, y, width, height`` in pixels, from ``bounding_boxes.txt``,
    for the object-size study of Fig. 7) and ``class_names`` (``classes.txt`` name of each label).
    """

    layout = (
        "the CUB_200_2011/ folder holding images.txt, image_class_labels.txt, bounding_boxes.txt, "
        "classes.txt and images/<class>/<file>.jpg"
    )
    index_files = ("images.txt", "image_class_labels.txt", "bounding_boxes.txt", "classes.txt")
    canonical_counts = {"trainval": (5864, 100), "test": (5924, 100)}
    class_ranges = {"train": (1, 50), "val": (51, 100), "trainval": (1, 100), "test": (101, 200)}

    def _read_sides(self) -> dict[str, list[Record]]:
        paths = {int(r[0]): r[1] for r in read_table(self.root / "images.txt")}
        classes = {int(r[0]): int(r[1]) for r in read_table(self.root / "image_class_labels.txt")}
        boxes = {int(r[0]): [float(v) for v in r[1:5]] for r in read_table(self.root / "bounding_boxes.txt")}
        self._names = {int(r[0]): r[1] for r in read_table(self.root / "classes.txt")}
        missing = sorted(set(paths) - classes.keys())
        if missing:
            raise ValueError(
                f"CUB200: image ids {missing[:5]} of images.txt have no class in image_class_labels.txt"
            )
        self._boxes_by_file = {f"images/{paths[i]}": boxes.get(i, [np.nan] * 4) for i in paths}
        records = [(f"images/{paths[i]}", classes[i]) for i in sorted(paths)]
        return self._sides_from(records)

    def __init__(
        self,
        root: str | Path | None,
        split: str,
        transform: Callable[[Any], Any] | None = None,
        check_counts: bool = True,
    ) -> None:
        super().__init__(root, split, transform, check_counts)
        self.boxes = np.asarray([self._boxes_by_file[f] for f in self.files], dtype=np.float32).reshape(-1, 4)
        self.class_names = [self._names.get(c, str(c)) for c in self.class_ids]

    def cache_scale_hook(self, dst_root: Path, scales: dict[str, float]) -> None:
        """Scale ``bounding_boxes.txt`` in the cache by each image's resize factor."""
        paths = {r[0]: f"images/{r[1]}" for r in read_table(self.root / "images.txt")}
        lines = []
        for row in read_table(self.root / "bounding_boxes.txt"):
            s = scales.get(paths.get(row[0], ""), 1.0)
            lines.append(" ".join([row[0], *(f"{float(v) * s:.1f}" for v in row[1:5])]))
        (dst_root / "bounding_boxes.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


@DATASETS.register("cars")
class Cars196(_ClassRangeDataset):
    """Stanford Cars: 16,185 images of 196 car models (0-based train 0-48, val 49-97, test 98-195).

    Reads ``cars_annos.mat`` (MATLAB struct array ``annotations`` with ``relative_im_path`` and ``class``;
    ``class_names``). Images are ordered by path, so the order of the struct array does not matter. The
    ``test`` flag of the file is ignored (it is the classification split). Extra attribute ``class_names``.
    """

    layout = "the folder holding cars_annos.mat and car_ims/<file>.jpg"
    index_files = ("cars_annos.mat",)
    canonical_counts = {"trainval": (8054, 98), "test": (8131, 98)}
    class_ranges = {"train": (1, 49), "val": (50, 98), "trainval": (1, 98), "test": (99, 196)}

    def _read_sides(self) -> dict[str, list[Record]]:
        import scipy.io

        mat = scipy.io.loadmat(self.root / "cars_annos.mat", squeeze_me=True, struct_as_record=False)
        if "annotations" not in mat:
            raise ValueError(f"Cars196: {self.root / 'cars_annos.mat'} has no 'annotations' struct array")
        annotations = np.atleast_1d(mat["annotations"])
        names = np.atleast_1d(mat.get("class_names", np.array([], dtype=object)))
        self._names = {i + 1: str(n) for i, n in enumerate(names)}
        # "class" is a Python keyword, hence getattr
        records = sorted((str(a.relative_im_path), int(getattr(a, "class"))) for a in annotations)
        return self._sides_from(records)

    def __init__(
        self,
        root: str | Path | None,
        split: str,
        transform: Callable[[Any], Any] | None = None,
        check_counts: bool = True,
    ) -> None:
        super().__init__(root, split, transform, check_counts)
        self.class_names = [self._names.get(c, str(c)) for c in self.class_ids]


@DATASETS.register("sop")
class SOP(ImageFileDataset):
    """Stanford Online Products: 120,053 images of 22,634 products (0-based train 0-5658, val 5659-11317,
    test 11318-22633). Reads ``Ebay_train.txt`` / ``Ebay_test.txt`` (header
    ``image_id class_id super_class_id path``). Extra attribute ``super_class_ids``.
    """

    splits = ("train", "val", "trainval", "test")
    check_splits = ("trainval", "test")
    layout = (
        "the Stanford_Online_Products/ folder holding Ebay_train.txt, Ebay_test.txt and <category>_final/"
    )
    index_files = ("Ebay_train.txt", "Ebay_test.txt")
    canonical_counts = {"trainval": (59551, 11318), "test": (60502, 11316)}
    last_train_class = 5659  # Ebay_train class ids 1..11318: train is the first half, val the second

    def _read_sides(self) -> dict[str, list[Record]]:
        self._super = {}
        sides = {}
        for side, fname in (("trainval", "Ebay_train.txt"), ("test", "Ebay_test.txt")):
            rows = read_table(self.root / fname, skip=1)
            sides[side] = [(r[3], int(r[1])) for r in rows]
            self._super.update({r[3]: int(r[2]) for r in rows})
        return sides

    def _select(self, sides: dict[str, list[Record]], split: str) -> tuple[list[Record], list | None]:
        if split == "train":
            return _by_class_range(sides["trainval"], 1, self.last_train_class), None
        if split == "val":
            return _by_class_range(sides["trainval"], self.last_train_class + 1, 10**9), None
        return sides[split], None

    def __init__(
        self,
        root: str | Path | None,
        split: str,
        transform: Callable[[Any], Any] | None = None,
        check_counts: bool = True,
    ) -> None:
        super().__init__(root, split, transform, check_counts)
        self.super_class_ids = [self._super[f] for f in self.files]


@DATASETS.register("inshop")
class InShop(ImageFileDataset):
    """In-Shop Clothes Retrieval (DeepFashion): 3,997 training items (25,882 images) and 3,985 test items
    split into 14,218 query and 12,612 gallery images. Reads ``Eval/list_eval_partition.txt`` (a count
    line, a header line, then whitespace-aligned ``image_name item_id evaluation_status``).

    ``class_ids`` are item ids (``id_00000001``). ``query`` and ``gallery`` share one label map over the
    sorted union of their items; ``train``/``val`` are the first ``n // 2`` / remaining training items in
    sorted item-id order (no official division exists; ProxyNCA++ trained In-Shop on ``trainval`` only).
    """

    splits = ("train", "val", "trainval", "query", "gallery")
    check_splits = ("trainval", "query", "gallery")
    layout = "the In-shop folder holding Eval/list_eval_partition.txt and img/<gender>/<category>/<item>/"
    index_files = ("Eval/list_eval_partition.txt",)
    canonical_counts = {
        "train": (25882, 3997),
        "query": (14218, None),
        "gallery": (12612, None),
        "query+gallery": (26830, 3985),
    }

    def _read_sides(self) -> dict[str, list[Record]]:
        path = self.root / "Eval" / "list_eval_partition.txt"
        rows = read_table(path, skip=2)
        sides: dict[str, list[Record]] = {"train": [], "query": [], "gallery": []}
        for row in rows:
            if len(row) != 3 or row[2] not in sides:
                raise ValueError(f"InShop: unexpected line {' '.join(row)!r} in {path}")
            sides[row[2]].append((row[0], row[1]))
        return sides

    def _count_sides(self, sides: dict[str, list[Record]]) -> dict[str, list[Record]]:
        return {**sides, "query+gallery": sides["query"] + sides["gallery"]}

    def _select(self, sides: dict[str, list[Record]], split: str) -> tuple[list[Record], list | None]:
        if split in ("query", "gallery"):
            return sides[split], sorted({c for _, c in sides["query"] + sides["gallery"]})
        items = sorted({c for _, c in sides["train"]})
        chosen = {"trainval": items, "train": items[: len(items) // 2], "val": items[len(items) // 2 :]}[
            split
        ]
        keep = set(chosen)
        return [r for r in sides["train"] if r[1] in keep], None
