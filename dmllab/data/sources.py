"""The datasets ``dmllab data fetch`` knows: where each copy of a benchmark comes from, its published checksums, and
the bounds its archives must respect when unpacked.

Every dataset is described by a :class:`DatasetSource` in :data:`SOURCES`: the copies of it that exist (the
official archives first), each a tuple of :class:`Archive` (file name, URL, published checksum and where
URL and checksum come from). Tests replace an entry (``dataclasses.replace``) instead of patching
functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dmllab.registry import Registry

GiB = 1 << 30


@dataclass(frozen=True)
class Archive:
    """One published file of a dataset.

    Args:
        filename: the file's published name; ``--from`` files are matched by it.
        url: where ``fetch`` downloads it; None when no working download exists (``--from`` only).
        md5, sha256: the published checksum (hex), None where none is published (the manifest then records
            the sha256 that was computed).
        source: where ``url`` and the checksum come from (file and line of a package or repository).
        place: ``""`` to unpack the archive (tar or zip) into the dataset's temporary folder, or the path,
            relative to the dataset folder, to copy a plain file to (``cars_annos.mat``).
        max_bytes, max_entries: what unpacking the archive may write at most (bytes of its files, entries);
            beyond either, unpacking stops with :class:`~dmllab.data.unpack.ArchiveTooLargeError` (a
            decompression bomb, or not the published archive). Set for every archive that is unpacked.
    """

    filename: str
    url: str | None
    md5: str | None = None
    sha256: str | None = None
    source: str = ""
    place: str = ""
    max_bytes: int | None = None
    max_entries: int | None = None

    @property
    def checksum(self) -> tuple[str, str] | None:
        """``(algorithm, hex digest)`` of the published checksum (sha256 preferred), or None."""
        if self.sha256:
            return "sha256", self.sha256.lower()
        if self.md5:
            return "md5", self.md5.lower()
        return None

    def describe(self) -> str:
        """``name (md5 ...)`` or ``name (no published checksum)``, for messages."""
        checksum = self.checksum
        return (
            f"{self.filename} ({checksum[0]} {checksum[1]})"
            if checksum
            else f"{self.filename} (no published checksum)"
        )


@dataclass(frozen=True)
class Copy:
    """One form in which a dataset is distributed: the archives that make it up and how they become the layout
    the loader reads.

    Args:
        label: short name (``official``, ``kaggle``), recorded in the manifest.
        archives: every file of this copy.
        folder: the folder inside the unpacked archives that is the dataset folder (``CUB_200_2011``);
            ``""``: the temporary folder itself.
        convert: writes, inside the dataset folder, the index files the loader reads from the copy's own
            index files (None: the copy already has them).
        note: one sentence on this copy (where it comes from, how it differs from the official one).
        where: where people get the files today when an archive has no URL (printed in the error).
    """

    label: str
    archives: tuple[Archive, ...]
    folder: str = ""
    convert: Callable[[Path], None] | None = None
    note: str = ""
    where: str = ""

    def describe(self) -> str:
        return " and ".join(a.describe() for a in self.archives)


@dataclass(frozen=True)
class DatasetSource:
    """A dataset's name in :data:`DATASETS`, its home page, its copies (the official one first: ``fetch``
    without ``--from`` downloads it) and, when the official copy has no URL, why (``gone``)."""

    name: str
    title: str
    homepage: str
    copies: tuple[Copy, ...]
    gone: str = ""

    @property
    def official(self) -> Copy:
        return self.copies[0]


class FetchError(ValueError):
    """A fetch cannot go on; the message names the file or URL and what to do."""


class ChecksumError(FetchError):
    """A file's checksum differs from the published one."""


class ManualDownloadError(FetchError):
    """A dataset file has no working download: it must be passed with ``--from``."""


class DownloadError(OSError):
    """A download failed or stopped; the ``.part`` file is kept so that a re-run resumes it."""


# ------------------------------------------------------------------------------------------- the sources
# Citations: "PML" is pytorch-metric-learning 2.9.0 as installed (site-packages/pytorch_metric_learning/
# datasets/); "powerful-benchmarker" is github.com/KevinMusgrave/powerful-benchmarker, branch metric-learning
# (commit 222790a78ddd), src/powerful_benchmarker/datasets/. Neither torchvision 0.29 nor PML 2.9 carries a
# checksum for these four datasets (torchvision has no CUB, SOP or In-Shop class; its StanfordCars has no
# download since pytorch/vision#7545 and reads the classification layout cars_train/ + devkit, not
# car_ims/ + cars_annos.mat).
# Bounds of unpacking (Archive.max_bytes / max_entries): the published archives hold the canonical image counts
# (CUB 11,788, Cars 16,185, SOP 120,053, In-Shop 52,712) plus their folders and index files, in about 1-3 GB;
# each bound is about three times that, far below what a decompression bomb writes.
CUB_ARCHIVE = Archive(
    filename="CUB_200_2011.tgz",
    url="https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz",
    md5="97eceeb196236b17998738112f37df78",
    source=(
        "URL: PML datasets/cub.py:10 (CaltechDATA record 65de6-vp158); "
        "md5: powerful-benchmarker cub200.py:16, "
        "also tristandeleu/pytorch-meta torchmeta/datasets/cub.py (CUBClassDataset.tgz_md5)"
    ),
    max_bytes=4 * GiB,
    max_entries=40_000,
)
SOP_ARCHIVE = Archive(
    filename="Stanford_Online_Products.zip",
    url=(
        "https://drive.usercontent.google.com/download?id=1TclrpQOF_ullUP99wk_gjGN8pKvtErG8"
        "&export=download&authuser=0&confirm=t"
    ),
    md5="7f73d41a2f44250d4779881525aea32e",
    source=(
        "URL: PML datasets/sop.py:10-11 (the Google Drive link of the authors' README, "
        "github.com/rksltnl/Deep-Metric-Learning-CVPR16); md5: powerful-benchmarker "
        "stanford_online_products.py:14-16 (for the authors' former ftp://cs.stanford.edu/cs/cvgl/ copy)"
    ),
    max_bytes=12 * GiB,
    max_entries=400_000,
)
CARS_IMAGES = Archive(
    filename="car_ims.tgz",
    url=None,  # was http://ai.stanford.edu/~jkrause/car196/car_ims.tgz
    md5="d5c8f0aa497503f355e17dc7886c3f14",
    source="md5: powerful-benchmarker cars196.py:15-17 (of ai.stanford.edu/~jkrause/car196/car_ims.tgz)",
    max_bytes=6 * GiB,
    max_entries=50_000,
)
CARS_ANNOTATIONS = Archive(
    filename="cars_annos.mat",
    url=None,  # was http://ai.stanford.edu/~jkrause/car196/cars_annos.mat
    md5="b407c6086d669747186bd1d764ff9dbc",
    source="md5: powerful-benchmarker cars196.py:19-21 (of ai.stanford.edu/~jkrause/car196/cars_annos.mat)",
    place="cars_annos.mat",
)
KAGGLE_CARS_URL = (
    "https://www.kaggle.com/api/v1/datasets/download/jutrera/stanford-car-dataset-by-classes-folder"
)
CARS_KAGGLE = Archive(
    filename="stanford-car-dataset-by-classes-folder.zip",
    url=None,  # no published checksum: used only when passed with --from
    source=f"the copy PML datasets/cars196.py:10 downloads ({KAGGLE_CARS_URL}); no checksum is published",
    max_bytes=6 * GiB,
    max_entries=50_000,
)
INSHOP_IMAGES = Archive(
    filename="img.zip",
    url=None,
    source="Img/img.zip of the DeepFashion In-shop folder; no checksum is published",
    max_bytes=6 * GiB,
    max_entries=200_000,
)
INSHOP_PARTITION = Archive(
    filename="list_eval_partition.txt",
    url=None,
    source="Eval/list_eval_partition.txt of the DeepFashion In-shop folder; no checksum is published",
    place="Eval/list_eval_partition.txt",
)


def convert_kaggle_cars(root: Path) -> None:
    """Write ``cars_annos.mat`` for the Kaggle copy of Cars196 that PML downloads (``names.csv``;
    ``anno_train.csv`` / ``anno_test.csv`` rows ``fname,x1,y1,x2,y2,class``; images under
    ``car_data/car_data/<train|test>/<class name>/<fname>``, PML datasets/cars196.py:20-57).

    The class ids are the devkit's 1..196, those of the official ``cars_annos.mat`` (PML splits this copy by
    them, classes 1-98 / 99-196, cars196.py:12-18), so the splits by class id are unchanged. The image files
    are the classification split's (``train/<class>/00001.jpg``...), not ``car_ims/000001.jpg``..., so the
    images are ordered differently within a split and the fingerprint differs from the official copy's.

    Raises FetchError: a file is missing, a row is malformed, or an annotated image is not in the archive."""
    import numpy as np
    import scipy.io

    def read(name: str) -> list[str]:
        path = root / name
        if not path.is_file():
            raise FetchError(f"the Kaggle Cars196 copy has no {name} at its top level; is it the PML copy?")
        return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    names = read("names.csv")
    images: dict[tuple[str, str], str] = {}  # (split, file name) -> path relative to root
    for split in ("train", "test"):
        base = root / "car_data" / "car_data" / split
        for path in sorted(base.glob("*/*")):
            key = (split, path.name)
            if key in images:
                raise FetchError(f"the Kaggle Cars196 copy holds {split}/{path.name} twice ({images[key]})")
            images[key] = path.relative_to(root).as_posix()
    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    rows = []
    for split in ("train", "test"):
        for number, line in enumerate(read(f"anno_{split}.csv"), start=1):
            cells = line.split(",")
            try:
                box, label = [int(c) for c in cells[1:5]], int(cells[-1])
            except (ValueError, IndexError):
                raise FetchError(
                    f"anno_{split}.csv, line {number}: expected fname,x1,y1,x2,y2,class; found {line!r}"
                ) from None
            if len(cells) != 6 or not 1 <= label <= len(names):
                raise FetchError(
                    f"anno_{split}.csv, line {number}: expected fname,x1,y1,x2,y2,class with a class in "
                    f"1..{len(names)}; found {line!r}"
                )
            if (split, cells[0]) not in images:
                raise FetchError(
                    f"anno_{split}.csv, line {number}: image {cells[0]} is not in car_data/car_data/{split}/"
                )
            rows.append([images[split, cells[0]], *box, label, int(split == "test")])
    annotations = np.zeros((1, len(rows)), dtype=[(f, "O") for f in fields])
    for i, row in enumerate(rows):
        for name, value in zip(fields, row):
            annotations[0, i][name] = value if isinstance(value, str) else np.int32(value)
    class_names = np.empty((1, len(names)), dtype=object)
    class_names[0, :] = names
    scipy.io.savemat(root / "cars_annos.mat", {"annotations": annotations, "class_names": class_names})


SOURCES: Registry[DatasetSource] = Registry("dataset to fetch")
for _source in (
    DatasetSource(
        name="cub",
        title="CUB-200-2011",
        homepage="https://www.vision.caltech.edu/datasets/cub_200_2011/",
        copies=(Copy("official", (CUB_ARCHIVE,), folder="CUB_200_2011"),),
    ),
    DatasetSource(
        name="cars",
        title="Stanford Cars (Cars196)",
        homepage="https://ai.stanford.edu/~jkrause/cars/car_dataset.html (gone since 2023)",
        copies=(
            Copy(
                "official",
                (CARS_IMAGES, CARS_ANNOTATIONS),
                where="copies of the original Stanford files (a lab share, a colleague's download)",
            ),
            Copy(
                "kaggle",
                (CARS_KAGGLE,),
                convert=convert_kaggle_cars,
                note="PML's Kaggle copy: the same images and class ids under the classification split's file "
                "names; dmllab writes its cars_annos.mat",
                where=f"PML's Kaggle copy from {KAGGLE_CARS_URL}",
            ),
        ),
        gone="the Stanford page has been gone since 2023, pytorch/vision#7545 and #8309",
    ),
    DatasetSource(
        name="sop",
        title="Stanford Online Products",
        homepage="https://cvgl.stanford.edu/projects/lifted_struct/",
        copies=(Copy("official", (SOP_ARCHIVE,), folder="Stanford_Online_Products"),),
    ),
    DatasetSource(
        name="inshop",
        title="DeepFashion In-Shop Clothes Retrieval",
        homepage="https://mmlab.ie.cuhk.edu.hk/projects/DeepFashion/InShopRetrieval.html",
        copies=(
            Copy(
                "official",
                (INSHOP_IMAGES, INSHOP_PARTITION),
                where="Img/img.zip and Eval/list_eval_partition.txt of the "
                "'In-shop Clothes Retrieval Benchmark' Google Drive folder linked from "
                "https://mmlab.ie.cuhk.edu.hk/projects/DeepFashion/InShopRetrieval.html",
            ),
        ),
        gone="its files are in a Google Drive folder that needs a browser",
    ),
):
    SOURCES.register(_source.name, _source)
