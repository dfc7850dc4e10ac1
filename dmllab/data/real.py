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

import hashlib
import os
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
from dmllab.data.index import (
    DuplicateImageIdError,
    IndexFileError,
    check_unique,
    class_id,
    cub_box,
    image_relpath,
    parse_int,
    read_id_table,
    read_lines,
    read_rows,
)
from dmllab.data.manifest import MANIFEST, DatasetCacheError, read_manifest
from dmllab.fileio import NotRegularFileError, regular_file, write_text_atomic
from dmllab.validation import check_path

Record = tuple[str, Hashable]  # (image path relative to the dataset root, original class id)


def load_image(path: Path) -> Image.Image:
    """Decode an RGB image; a missing or undecodable file raises :class:`ImageLoadError` naming it."""
    try:
        regular_file(path, "image file")  # a FIFO listed as an image would block the reader forever
        with Image.open(path) as img:
            return img.convert("RGB")  # convert() forces the full decode inside the try
    except FileNotFoundError:
        raise ImageLoadError(f"image file is missing: {path}") from None
    except NotRegularFileError as err:
        raise ImageLoadError(str(err)) from None
    except (OSError, ValueError, SyntaxError) as err:  # PIL raises these on truncated or corrupt data
        raise ImageLoadError(f"cannot decode image {path}: {err}") from err


class EmptySplitError(DatasetCountError):
    """A split of a dataset folder holds no image (an empty or truncated index file)."""


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

    @classmethod
    def inputs(cls, root: str | Path | None, **kwargs: Any) -> str:
        """What a run key needs beyond the config: the copy at ``root`` (:func:`fingerprint`), "missing" without
        one (no run can be trained, nor found, without the data)."""
        name = next(n for n in DATASETS.names() if DATASETS.get(n) is cls)
        try:
            return fingerprint(name, root)
        except DatasetNotFoundError:
            return "missing"

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
        if not records:
            raise EmptySplitError(
                f"{type(self).__name__} at {self.root}: split {split!r} has no images (the index files "
                f"{', '.join(self.index_files)} list none for it); an empty split is never usable: restore the "
                f"index files. {README_HINT}"
            )
        self.files: list[str] = [f for f, _ in records]
        self.labels, self.class_ids = contiguous_labels([c for _, c in records], class_order)
        self._attach()

    def _attach(self) -> None:
        """Set a dataset's extra attributes (``boxes``, ``class_names``, ...) once the split is built."""

    # -- layout -------------------------------------------------------------------------------------------
    def _check_root(self, root: str | Path | None) -> Path:
        name = type(self).__name__
        if root is None:
            raise DatasetNotFoundError(f"{name}: no root given. Expected {self.layout}; {README_HINT}")
        root = check_path(f"{name} root", root)
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

    @classmethod
    def index_records(cls, root: str | Path | None) -> dict[str, list[Record]]:
        """The parsed index of the dataset folder ``root`` (side -> records), without building a split."""
        reader = cls.__new__(cls)  # only the index is read: no split, no counts, no transform
        reader.root = reader._check_root(root)
        return reader._read_sides()

    def _select(self, sides: dict[str, list[Record]], split: str) -> tuple[list[Record], list | None]:
        raise NotImplementedError

    @classmethod
    def split_images(cls, split: str) -> float:
        """Images of ``split`` in the canonical dataset, without reading it: exact for a split the canonical
        counts give, else the images of the canonical group it is part of in proportion to its classes (what a
        study's GPU cost is estimated from, :mod:`dmllab.pipeline.cost`).

        Raises KeyError: a split the dataset does not have."""
        raise NotImplementedError

    @classmethod
    def _part(cls, group: str, classes: float | None = None) -> float:
        """The images of the canonical ``group``, or of ``classes`` of its classes in proportion."""
        images, total = cls.canonical_counts[group]
        return images if classes is None or not total else images * classes / total

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
                + "). To use a partial copy anyway: --set data.dataset.check_counts=false (dmllab train), --no-counts "
                + "(dmllab data check), check_counts=False (Python); "
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

    def _attach(self) -> None:
        self.class_names = [self._names.get(c, str(c)) for c in self.class_ids]

    def _sides_from(self, records: list[Record]) -> dict[str, list[Record]]:
        return {s: _by_class_range(records, *self.class_ranges[s]) for s in ("trainval", "test")}

    @classmethod
    def split_images(cls, split: str) -> float:
        lo, hi = cls.class_ranges[split]
        group = next(
            g for g in ("trainval", "test") if cls.class_ranges[g][0] <= lo and hi <= cls.class_ranges[g][1]
        )
        return cls._part(group, hi - lo + 1)


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
        images, labels = self.root / "images.txt", self.root / "image_class_labels.txt"
        boxes_file = self.root / "bounding_boxes.txt"
        paths = {
            i: image_relpath(f[1], f"{images}, line {n}")
            for i, (n, f) in read_id_table(images, 2, "image_id path", maxsplit=1).items()
        }
        classes = {
            i: class_id(f[1], labels, n, 200)
            for i, (n, f) in read_id_table(labels, 2, "image_id class_id").items()
        }
        boxes = {
            i: cub_box(f[1:5], boxes_file, n)
            for i, (n, f) in read_id_table(boxes_file, 5, "image_id x y width height").items()
        }
        self._names = {
            i: f[1]
            for i, (_, f) in read_id_table(self.root / "classes.txt", 2, "class_id name", maxsplit=1).items()
        }
        check_unique([(p, i) for i, p in paths.items()], images, "image path")
        for have, lack, file_have, file_lack in (
            (paths, classes, images, labels),
            (classes, paths, labels, images),
            (paths, boxes, images, boxes_file),
        ):
            missing = sorted(set(have) - lack.keys())
            if missing:
                raise IndexFileError(
                    f"CUB200: image ids {missing[:5]} of {file_have} are missing from {file_lack} "
                    "(truncated index file?)"
                )
        self._ids_by_file = {f"images/{paths[i]}": i for i in paths}
        self._boxes_by_id = boxes
        records = [(f"images/{paths[i]}", classes[i]) for i in sorted(paths)]
        return self._sides_from(records)

    def _attach(self) -> None:
        self.boxes = np.asarray(
            [self._boxes_by_id[self._ids_by_file[f]] for f in self.files], dtype=np.float32
        ).reshape(-1, 4)
        super()._attach()

    def cache_scale_hook(self, dst_root: Path, scales: dict[str, float]) -> None:
        """Scale ``bounding_boxes.txt`` in the cache by each image's resize factor."""
        files = {i: f for f, i in self._ids_by_file.items()}
        lines = []
        for i, box in sorted(self._boxes_by_id.items()):
            s = scales.get(files.get(i, ""), 1.0)
            lines.append(" ".join([str(i), *(f"{v * s:.1f}" for v in box)]))
        write_text_atomic(dst_root / "bounding_boxes.txt", "\n".join(lines) + "\n")


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

        path = self.root / "cars_annos.mat"
        try:
            mat = scipy.io.loadmat(path, squeeze_me=True, struct_as_record=False)
        except Exception as err:  # noqa: BLE001  (scipy raises MatReadError, ValueError, ... for a damaged file)
            if isinstance(err, OSError) and err.errno is not None:  # unreadable: the OSError names the file
                raise
            raise IndexFileError(
                f"{path} cannot be read as a MATLAB file ({type(err).__name__}: {err}); is it truncated? Download "
                f"it again. {README_HINT}"
            ) from None
        if "annotations" not in mat:
            raise IndexFileError(f"Cars196: {path} has no 'annotations' struct array")
        annotations = np.atleast_1d(mat["annotations"])
        names = np.atleast_1d(mat.get("class_names", np.array([], dtype=object)))
        self._names = {i + 1: str(n) for i, n in enumerate(names)}
        records = []
        for i, a in enumerate(annotations):
            try:  # "class" is a Python keyword, hence getattr
                rel, cid = str(a.relative_im_path), int(getattr(a, "class"))
            except (AttributeError, TypeError, ValueError) as err:
                raise IndexFileError(
                    f"{path}: annotation {i + 1} has no usable relative_im_path / class ({err})"
                ) from None
            records.append((image_relpath(rel, f"{path}, annotation {i + 1}"), cid))
            if not 1 <= records[-1][1] <= 196:
                raise IndexFileError(
                    f"{path}: annotation {i + 1} has class {records[-1][1]}, outside Cars196's 1..196 (a damaged or "
                    "foreign annotation file?)"
                )
        check_unique([(p, i + 1) for i, (p, _) in enumerate(records)], path, "image path (annotation)")
        return self._sides_from(sorted(records))


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
        first: dict[str, tuple[Path, int]] = {}  # image path -> (file, line) where it was first listed
        for side, fname in (("trainval", "Ebay_train.txt"), ("test", "Ebay_test.txt")):
            path = self.root / fname
            rows = read_rows(
                path, skip=1, columns=4, what="image_id class_id super_class_id path", maxsplit=3
            )
            rows = [(n, [*f[:3], image_relpath(f[3], f"{path}, line {n}")]) for n, f in rows]
            check_unique([(str(parse_int(f[0], path, n, "image id")), n) for n, f in rows], path, "image id")
            for n, f in rows:
                if f[3] in first:
                    where, line = first[f[3]]
                    raise DuplicateImageIdError(
                        f"{path}, line {n}: image path {f[3]} is already listed in {where}, line {line}; "
                        "each image may appear once"
                    )
                first[f[3]] = (path, n)
            sides[side] = [(f[3], class_id(f[1], path, n, None)) for n, f in rows]
            self._super.update({f[3]: parse_int(f[2], path, n, "super class id") for n, f in rows})
        return sides

    @classmethod
    def split_images(cls, split: str) -> float:
        classes = cls.canonical_counts["trainval"][1] or 0
        part = {"train": cls.last_train_class, "val": classes - cls.last_train_class}
        return cls._part("trainval", part[split]) if split in part else cls._part(split)

    def _select(self, sides: dict[str, list[Record]], split: str) -> tuple[list[Record], list | None]:
        if split == "train":
            return _by_class_range(sides["trainval"], 1, self.last_train_class), None
        if split == "val":
            return _by_class_range(sides["trainval"], self.last_train_class + 1, 10**9), None
        return sides[split], None

    def _attach(self) -> None:
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
        lines = read_lines(path)
        announced = lines[0].strip() if lines else ""
        if not announced.isdigit():
            raise IndexFileError(f"{path}, line 1: expected the number of images, found {announced!r}")
        rows = read_rows(path, skip=2)
        sides: dict[str, list[Record]] = {"train": [], "query": [], "gallery": []}
        for number, row in rows:
            if len(row) != 3 or row[2] not in sides:
                raise IndexFileError(
                    f"{path}, line {number}: expected 'image_name item_id train|query|gallery', "
                    f"found {' '.join(row)!r}"
                )
            sides[row[2]].append((image_relpath(row[0], f"{path}, line {number}"), row[1]))
        check_unique([(r[0], n) for n, r in rows], path, "image")
        if int(announced) != len(rows):
            raise IndexFileError(
                f"{path}: line 1 announces {int(announced)} images but {len(rows)} are listed "
                "(truncated index file?)"
            )
        return sides

    def _count_sides(self, sides: dict[str, list[Record]]) -> dict[str, list[Record]]:
        return {**sides, "query+gallery": sides["query"] + sides["gallery"]}

    @classmethod
    def split_images(cls, split: str) -> float:
        items = cls.canonical_counts["train"][1] or 0  # the index's "train" side is dmllab's trainval
        part = {"trainval": items, "train": items // 2, "val": items - items // 2}
        return cls._part("train", part[split]) if split in part else cls._part(split)

    def _select(self, sides: dict[str, list[Record]], split: str) -> tuple[list[Record], list | None]:
        if split in ("query", "gallery"):
            return sides[split], sorted({c for _, c in sides["query"] + sides["gallery"]})
        items = sorted({c for _, c in sides["train"]})
        chosen = {"trainval": items, "train": items[: len(items) // 2], "val": items[len(items) // 2 :]}[
            split
        ]
        keep = set(chosen)
        return [r for r in sides["train"] if r[1] in keep], None


# ------------------------------------------------------------------------------------------- fingerprint
def is_real_dataset(name: str) -> bool:
    """True for a registered dataset read from a folder of images (CUB, Cars, SOP, In-Shop)."""
    cls = DATASETS.get(name) if name in DATASETS.names() else None
    return isinstance(cls, type) and issubclass(cls, ImageFileDataset)


def fingerprint(dataset_name: str, root: str | Path | None, *, check_cache: bool = True) -> str:
    """A 16-hex-digit fingerprint of the dataset copy at ``root``: sha256 of the dataset name, the bytes of
    every index file and the image list (relative path and file size of every image the index names, -1
    for a missing one), never the image bytes. Two folders holding the same copy share it; a partial,
    corrupted (size-changed) or different copy does not, whatever its path.

    Cost: reading the index files and one ``stat`` per image (about a second for SOP's 120,053 images).

    When ``root`` is a cache of ``dmllab data cache`` (``check_cache``), the fingerprint is also compared with
    the one recorded when it was built (:func:`dmllab.data.cache.check_cache`): a copy that changed since, or
    whose build was interrupted, is refused.

    Raises:
        ValueError: ``dataset_name`` is not a real dataset. DatasetNotFoundError / IndexFileError: as when
        the dataset is built. DatasetCacheError: a cache that is not the copy it was built as.
    """
    if not is_real_dataset(dataset_name):
        real = [n for n in DATASETS.names() if is_real_dataset(n)]
        raise ValueError(
            f"{dataset_name!r} is not a dataset read from a folder; those are: {', '.join(real)}"
        )
    cls = DATASETS.get(dataset_name)
    sides = cls.index_records(root)  # checks the root and the index files first
    base = Path(root).expanduser().resolve()
    h = hashlib.sha256(f"dmllab dataset {dataset_name}\n".encode())
    for rel in cls.index_files:
        h.update(f"index {rel}\n".encode())
        h.update(hashlib.sha256((base / rel).read_bytes()).digest())
    for rel in sorted({f for records in sides.values() for f, _ in records}):
        try:
            size = os.stat(base / rel).st_size
        except OSError:
            size = -1
        h.update(f"{rel}\0{size}\n".encode())
    digest = h.hexdigest()[:16]
    if check_cache and (base / MANIFEST).is_file():
        manifest = read_manifest(base) or {}
        if not manifest.get("complete", True):
            raise DatasetCacheError(
                f"{base} is an interrupted dmllab data cache; run dmllab data cache again"
            )
        if manifest.get("fingerprint") not in (None, digest):
            raise DatasetCacheError(
                f"the dataset cache {base} changed since it was built (index files or images differ); delete it and "
                "run dmllab data cache again"
            )
    return digest
