"""``dmllab data fetch``: download (or take from disk) a real benchmark's archives, verify them, unpack them
into the layout the loaders of :mod:`dmllab.data.real` read, and hand the folder to ``dmllab data check``.

Every dataset is described by a :class:`DatasetSource` in :data:`SOURCES`: the copies of it that exist (the
official archives first), each a tuple of :class:`Archive` (file name, URL, published checksum and where
URL and checksum come from). Tests replace an entry (``dataclasses.replace``) instead of patching
functions.

Nothing is half-made: an archive is downloaded to ``<file>.part`` next to its target (a re-run resumes it
with an HTTP ``Range`` request), renamed only once its checksum matches, unpacked into a temporary folder
beside the dataset folder, and that folder is renamed into place only when every archive verified and the
index files the loader needs are there. A failure removes the temporary folder; a bad checksum also removes
the download.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from dmllab.data.base import DATASETS
from dmllab.registry import Registry

MANIFEST = "dmllab_fetch.json"
CHUNK = 1 << 20  # bytes per read while downloading and hashing
RETRY_WAIT_S = 2.0  # pause before resuming an interrupted download (times the attempt number)


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
    """

    filename: str
    url: str | None
    md5: str | None = None
    sha256: str | None = None
    source: str = ""
    place: str = ""

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
CUB_ARCHIVE = Archive(
    filename="CUB_200_2011.tgz",
    url="https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz",
    md5="97eceeb196236b17998738112f37df78",
    source=(
        "URL: PML datasets/cub.py:10 (CaltechDATA record 65de6-vp158); "
        "md5: powerful-benchmarker cub200.py:16, "
        "also tristandeleu/pytorch-meta torchmeta/datasets/cub.py (CUBClassDataset.tgz_md5)"
    ),
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
)
CARS_IMAGES = Archive(
    filename="car_ims.tgz",
    url=None,  # was http://ai.stanford.edu/~jkrause/car196/car_ims.tgz
    md5="d5c8f0aa497503f355e17dc7886c3f14",
    source="md5: powerful-benchmarker cars196.py:15-17 (of ai.stanford.edu/~jkrause/car196/car_ims.tgz)",
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
)
INSHOP_IMAGES = Archive(
    filename="img.zip",
    url=None,
    source="Img/img.zip of the DeepFashion In-shop folder; no checksum is published",
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

    Raises:
        FetchError: a file is missing, a row is malformed, or an annotated image is not in the archive.
    """
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
SOURCES.register(
    "cub",
    DatasetSource(
        name="cub",
        title="CUB-200-2011",
        homepage="https://www.vision.caltech.edu/datasets/cub_200_2011/",
        copies=(Copy("official", (CUB_ARCHIVE,), folder="CUB_200_2011"),),
    ),
)
SOURCES.register(
    "cars",
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
)
SOURCES.register(
    "sop",
    DatasetSource(
        name="sop",
        title="Stanford Online Products",
        homepage="https://cvgl.stanford.edu/projects/lifted_struct/",
        copies=(Copy("official", (SOP_ARCHIVE,), folder="Stanford_Online_Products"),),
    ),
)
SOURCES.register(
    "inshop",
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
)


# -------------------------------------------------------------------------------------------- the steps
def digests(path: Path, progress: bool = False) -> dict[str, str]:
    """``{"md5": ..., "sha256": ...}`` of a file, read once."""
    from tqdm.auto import tqdm

    md5, sha256 = hashlib.md5(), hashlib.sha256()
    with (
        open(path, "rb") as fh,
        tqdm(
            total=path.stat().st_size,
            desc=f"verifying {path.name}",
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            disable=not progress,
            file=sys.stderr,
        ) as bar,
    ):
        while chunk := fh.read(CHUNK):
            md5.update(chunk)
            sha256.update(chunk)
            bar.update(len(chunk))
    return {"md5": md5.hexdigest(), "sha256": sha256.hexdigest()}


def _content_range_start(header: str | None) -> int | None:
    """The first byte of ``Content-Range: bytes START-END/TOTAL``, None if absent or malformed."""
    if not header or not header.startswith("bytes "):
        return None
    try:
        return int(header[6:].split("-", 1)[0])
    except ValueError:
        return None


class _Transient(Exception):
    """No answer (DNS, refused, timeout) or a transfer that stopped part-way: worth another try."""


def _download_once(url: str, part: Path, progress: bool) -> None:
    """Append the rest of ``url`` to ``part`` (a Range request when ``part`` holds bytes already).

    Raises:
        DownloadError: an HTTP error status or an HTML page instead of the file (not worth retrying).
        _Transient: no answer, or the transfer stopped part-way.
    """
    from tqdm.auto import tqdm

    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "dmllab-fetch"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the .part already holds every byte: the checksum decides
            return
        raise DownloadError(
            f"{url} answered HTTP {err.code} {err.reason}; check the URL, or download the file elsewhere and "
            "pass it with --from"
        ) from None
    except (OSError, http.client.HTTPException) as err:
        raise _Transient(str(getattr(err, "reason", None) or err)) from None
    with response:
        if "text/html" in response.headers.get("Content-Type", ""):
            raise DownloadError(
                f"{url} sent an HTML page instead of the file (a sign-in, quota or 'file moved' page?); "
                "download the file in a browser and pass it with --from"
            )
        resumed = (
            response.status == 206 and _content_range_start(response.headers.get("Content-Range")) == have
        )
        if have and not resumed:
            have = 0  # the server ignored the Range request: start again
        length = response.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        with (
            open(part, "ab" if have else "wb") as out,
            tqdm(
                total=total,
                initial=have,
                desc=part.name.removesuffix(".part"),
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                disable=not progress,
                file=sys.stderr,
            ) as bar,
        ):
            while True:
                try:
                    chunk = response.read(CHUNK)
                except (OSError, http.client.HTTPException) as err:  # reset, timeout; not a full disk
                    raise _Transient(f"{type(err).__name__}: {err}") from None
                if not chunk:
                    break
                out.write(chunk)
                bar.update(len(chunk))
    got = part.stat().st_size
    if total is not None and got < total:
        raise _Transient(f"the connection closed after {got} of {total} bytes")


def download(url: str, target: Path, *, retries: int = 3, progress: bool = True) -> Path:
    """Download ``url`` into ``target.part`` and return that path (the caller renames it to ``target`` once
    its checksum matched). An existing ``.part`` of an earlier run is resumed with an HTTP Range request (a
    server that ignores Range sends the whole file again); an interrupted transfer is resumed ``retries``
    times within this call.

    Raises:
        DownloadError: one line naming the URL, and the ``.part`` kept for the next run.
    """
    part = target.with_name(target.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(retries + 1):
        try:
            _download_once(url, part, progress)
            return part
        except _Transient as err:
            if attempt < retries:
                time.sleep(RETRY_WAIT_S * (attempt + 1))
                continue
            size = part.stat().st_size if part.exists() else 0
            if size:
                raise DownloadError(
                    f"download of {url} stopped ({err}); {part} ({size} bytes) is kept: re-run the same "
                    "command to resume it"
                ) from None
            part.unlink(missing_ok=True)
            raise DownloadError(
                f"cannot download {url} ({err}); check the network, or download the file elsewhere and pass "
                "it with --from"
            ) from None
    raise AssertionError("unreachable")  # the last attempt returns or raises


def verify(archive: Archive, path: Path, found: dict[str, str]) -> bool:
    """True when ``archive`` has a published checksum and ``found`` (from :func:`digests`) matches it; False
    when none is published.

    Raises:
        ChecksumError: the checksum differs (naming the file, both digests and the checksum's source).
    """
    checksum = archive.checksum
    if checksum is None:
        return False
    algorithm, expected = checksum
    if found[algorithm] != expected:
        raise ChecksumError(
            f"{path}: {algorithm} {found[algorithm]} differs from the published {expected} "
            f"({archive.source}); "
            "the file is corrupt, incomplete or a different version"
        )
    return True


def choose_copy(source: DatasetSource, given: Sequence[Path]) -> tuple[Copy, dict[str, Path]]:
    """The copy of ``source`` that the ``--from`` files ``given`` belong to, and ``{archive name: file}``.

    Files are matched by name; a single file whose name matches nothing is taken for the one copy made of a
    single archive. Without files: the official copy, every archive of which must then have a URL.

    Raises:
        ManualDownloadError: an archive has no URL and was not given (naming the files and checksums).
        FetchError: a given file matches no archive of any copy.
    """
    if not given:
        copy = source.official
        missing = [a for a in copy.archives if a.url is None]
        if missing:
            raise ManualDownloadError(_manual_message(source))
        return copy, {}
    by_name = {Path(p).name: Path(p) for p in given}
    for copy in source.copies:
        names = {a.filename for a in copy.archives}
        if set(by_name) <= names:
            files = {n: by_name[n] for n in names if n in by_name}
            missing = [a for a in copy.archives if a.filename not in files and a.url is None]
            if missing:
                raise ManualDownloadError(
                    f"{source.name}: --from also needs "
                    + " and ".join(a.describe() for a in missing)
                    + (f": {copy.where}" if copy.where else "")
                )
            return copy, files
    single = [c for c in source.copies if len(c.archives) == 1]
    if len(given) == 1 and len(single) == 1:
        return single[0], {single[0].archives[0].filename: Path(given[0])}
    expected = "; or ".join(c.describe() for c in source.copies)
    raise FetchError(
        f"{source.name}: --from got {', '.join(sorted(by_name))}, which is not {expected} "
        "(rename a file to its published name if it is one of these)"
    )


def _manual_message(source: DatasetSource) -> str:
    copies = [c.describe() + (f": {c.where}" if c.where else "") for c in source.copies]
    gone = f" ({source.gone})" if source.gone else ""
    return (
        f"{source.name}: {source.title} has no working download{gone}; pass its files with --from: "
        + "; or ".join(copies)
    )


def _unpack(archive: Archive, path: Path, staging: Path, progress: bool) -> None:
    """Extract ``path`` (tar or zip) into ``staging``, or copy it to ``staging / archive.place``."""
    from tqdm.auto import tqdm

    if archive.place:
        dest = staging / archive.place
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        return
    try:
        if tarfile.is_tarfile(path):
            with tarfile.open(path) as tar:
                for member in tqdm(
                    tar,
                    desc=f"unpacking {archive.filename}",
                    unit="file",
                    disable=not progress,
                    file=sys.stderr,
                ):
                    tar.extract(
                        member, staging, filter="data"
                    )  # refuses absolute paths, '..' and outside links
        elif zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                for member in tqdm(
                    zf.infolist(),
                    desc=f"unpacking {archive.filename}",
                    unit="file",
                    disable=not progress,
                    file=sys.stderr,
                ):
                    zf.extract(member, staging)  # ZipFile.extract drops absolute and '..' path parts
        else:
            raise FetchError(f"{path} is neither a tar nor a zip archive; is it {archive.filename}?")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as err:
        raise FetchError(
            f"cannot unpack {path} ({type(err).__name__}: {err}); is the file complete?"
        ) from None


def _check_root_free(root: Path) -> bool:
    """True if ``root`` holds a finished fetch (its manifest); raise if it holds anything else."""
    if not root.exists():
        return False
    if root.is_dir() and not any(root.iterdir()):
        return False
    if (root / MANIFEST).is_file():
        return True
    raise FetchError(
        f"{root} already exists and is not empty; check it with 'dmllab data check', or remove it or choose "
        "another folder to fetch into"
    )


@dataclass
class FetchResult:
    """What :func:`fetch_dataset` did: the dataset folder, its manifest, and whether it was there already."""

    root: Path
    manifest: dict = field(default_factory=dict)
    already_there: bool = False


def fetch_dataset(
    name: str,
    root: str | Path,
    *,
    archives: Sequence[str | Path] = (),
    source: DatasetSource | None = None,
    downloads: str | Path | None = None,
    keep_archives: bool = False,
    verify_checksums: bool = True,
    retries: int = 3,
    progress: bool = True,
    echo: Callable[[str], None] = lambda line: None,
) -> FetchResult:
    """Put dataset ``name`` at ``root`` (the folder the loader reads), from the official URLs or from the
    ``archives`` already on disk (``--from``).

    Args:
        source: the dataset's archives; default ``SOURCES.get(name)``.
        downloads: where downloads go (``<file>.part``, then ``<file>``); default ``root``'s parent folder.
        keep_archives: keep downloaded archives after unpacking (``--from`` files are never touched).
        verify_checksums: False unpacks a file whose checksum differs from the published one (the manifest
            records what was found); never used by default.
        retries: resumptions of an interrupted download within this call.
        echo: receives one line per step (the CLI passes ``print``).

    Returns:
        :class:`FetchResult`; ``root/dmllab_fetch.json`` records every file (name, URL or path, size, md5,
        sha256, published checksum and its source, or that none is published).

    Raises:
        FetchError (bad ``--from`` file, checksum, layout, non-empty ``root``), ManualDownloadError,
        DownloadError: one line each; ``root`` is not created and no temporary folder is left.
    """
    source = source if source is not None else SOURCES.get(name)
    cls = DATASETS.get(name)
    root = Path(root).expanduser().absolute()
    if _check_root_free(root):
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("dataset") != name:
            raise FetchError(
                f"{root} holds a fetch of {manifest.get('dataset')!r}, not {name!r}; choose another folder"
            )
        echo(f"{root} holds a finished fetch of {name} ({MANIFEST}); nothing to download")
        return FetchResult(root, manifest, already_there=True)
    given = [Path(a).expanduser().absolute() for a in archives]
    for path in given:
        if not path.is_file():
            raise FetchError(f"--from {path}: no such file")
    copy, files = choose_copy(source, given)
    if copy.note:
        echo(f"{source.name}: {copy.label} copy: {copy.note}")
    downloads = Path(downloads).expanduser().absolute() if downloads is not None else root.parent

    records, fetched = [], []
    for archive in copy.archives:
        path = files.get(archive.filename)
        target = downloads / archive.filename
        if path is not None and path.name != archive.filename:
            echo(f"{archive.filename}: taking {path}")
        reused = path is None and target.is_file()  # verified by an earlier run that stopped later on
        if reused:
            path = target
            echo(f"{archive.filename}: using the earlier download {target}")
        downloaded = path is None
        if downloaded:
            echo(f"{archive.filename}: downloading {archive.url}")
            path = download(archive.url, target, retries=retries, progress=progress)
        found = digests(path, progress)
        try:
            published = verify(archive, path, found) if verify_checksums else False
        except ChecksumError as err:
            if downloaded:
                path.unlink()
                raise ChecksumError(
                    f"{err} (downloaded from {archive.url}); the download was deleted: re-run to download "
                    "it again, or pass a good copy with --from"
                ) from None
            if reused:
                raise ChecksumError(f"{err}; delete it and re-run to download it again") from None
            raise
        if downloaded:
            path = path.replace(target)
            fetched.append(path)
        if published:
            echo(
                f"{archive.filename}: {' '.join(archive.checksum)} matches the published checksum "
                f"({archive.source})"
            )
        else:
            why = "not checked (--no-verify)" if archive.checksum else "no published checksum"
            echo(f"{archive.filename}: {why}; its sha256 {found['sha256']} goes into {MANIFEST}")
        records.append(
            {
                "filename": archive.filename,
                "url": archive.url if downloaded else None,
                "from": None if downloaded else str(path),
                "bytes": path.stat().st_size,
                **found,
                "published": (
                    {
                        "algorithm": archive.checksum[0],
                        "digest": archive.checksum[1],
                        "source": archive.source,
                    }
                    if archive.checksum
                    else None
                ),
                "verified": published,
            }
        )

    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.fetch-", dir=root.parent))
    try:
        for archive in copy.archives:
            path = files.get(archive.filename) or downloads / archive.filename
            _unpack(archive, path, staging, progress)
        folder = staging / copy.folder if copy.folder else staging
        if not folder.is_dir():
            raise FetchError(
                f"{source.name}: the archives hold no {copy.folder}/ folder; are they "
                f"{' and '.join(a.filename for a in copy.archives)} as published?"
            )
        if copy.convert is not None:
            copy.convert(folder)
        missing = [rel for rel in cls.index_files if not (folder / rel).is_file()]
        if missing:
            raise FetchError(
                f"{source.name}: after unpacking, {', '.join(missing)} is missing (expected {cls.layout}); "
                "are the archives the published ones?"
            )
        manifest = {
            "dataset": name,
            "copy": copy.label,
            "fetched": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "files": records,
        }
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if root.is_dir():
            root.rmdir()  # empty (checked above)
        os.replace(folder, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not keep_archives:
        for path in fetched:
            path.unlink(missing_ok=True)
    echo(f"{source.name}: {source.title} is at {root}")
    return FetchResult(root, manifest)
