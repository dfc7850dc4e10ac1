"""Reading the text index files of the real benchmarks: rows with their line numbers, image ids, class ids, CUB's
boxes and image paths, each checked where it is read, so that an error names the file and the line.

Image paths (:func:`image_relpath`) must be plain paths relative to the dataset root: an absolute path or a ``..``
part would read an image outside it (and ``dmllab data cache`` would write one outside its ``--out``), and another
spelling of a path (``img/./x.jpg``) would let one image be listed twice.
"""

from __future__ import annotations

import math
import posixpath
from pathlib import Path, PureWindowsPath

from dmllab.fileio import NotRegularFileError, naming, regular_file


class IndexFileError(ValueError):
    """A dataset index file is truncated or malformed; the message names the file and the line."""


class DuplicateImageIdError(IndexFileError):
    """An index file lists the same image id (or image path) twice: one image would get two entries."""


def read_lines(path: Path) -> list[str]:
    """The lines of the index file ``path`` (a regular file: a FIFO or a device is an IndexFileError)."""
    try:
        regular_file(path, "index file")
    except NotRegularFileError as err:
        raise IndexFileError(str(err)) from None
    with naming(path, "reading"), open(path, "rb") as fh:
        data = fh.read()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise IndexFileError(
            f"{path}, line {line}: not UTF-8 text (byte {err.start}: {data[err.start : err.start + 1]!r}); is the "
            "file corrupt?"
        ) from None


def read_rows(
    path: Path, skip: int = 0, columns: int | None = None, what: str = "", maxsplit: int = -1
) -> list[tuple[int, list[str]]]:
    """``(line number, fields)`` of every non-blank line of a whitespace-separated index file after ``skip``
    header lines (line numbers are 1-based, counted in the file). With ``maxsplit`` the line is split that many
    times at most, so the last field keeps its spaces (CUB's ``<image id> <path>``: a file name may hold one).

    Raises:
        IndexFileError: a line with fewer than ``columns`` fields (``what`` names them), naming file and line.
    """
    out = []
    for number, line in enumerate(read_lines(path)[skip:], start=skip + 1):
        fields = line.strip().split(None, maxsplit)
        if not fields:
            continue
        if columns is not None and len(fields) < columns:
            raise IndexFileError(
                f"{path}, line {number}: expected {columns} columns ({what}), found {len(fields)}: "
                f"{line.strip()!r} (truncated or malformed index file?)"
            )
        out.append((number, fields))
    return out


def parse_int(value: str, path: Path, line: int, what: str) -> int:
    """``int(value)``, or an IndexFileError naming the file, the line and the column ``what``."""
    try:
        number = int(value)
    except ValueError:
        raise IndexFileError(f"{path}, line {line}: {what} {value[:40]!r} is not an integer") from None
    if abs(number) > 2**63 - 1:
        raise IndexFileError(
            f"{path}, line {line}: {what} {value[:40]} is beyond 64 bits (a damaged index file?)"
        )
    return number


def class_id(value: str, path: Path, line: int, highest: int | None) -> int:
    """A 1-based class id of an index file, in 1..``highest`` (any positive id when None); IndexFileError naming
    file and line otherwise."""
    cid = parse_int(value, path, line, "class id")
    if cid < 1 or (highest is not None and cid > highest):
        bound = f"1..{highest}" if highest is not None else "positive"
        raise IndexFileError(
            f"{path}, line {line}: class id {cid} is not {bound} (a damaged or foreign index file?)"
        )
    return cid


#: The largest coordinate a box may have: a JPEG's sides are at most 65535 pixels.
MAX_IMAGE_SIDE = 65536


def parse_float(value: str, path: Path, line: int, what: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise IndexFileError(f"{path}, line {line}: {what} {value!r} is not a number") from None


def cub_box(values: list[str], path: Path, line: int) -> list[float]:
    """A CUB box ``x y width height``: finite numbers with a positive width and height (Fig. 7 bins the images by
    box area), else IndexFileError naming file and line."""
    x, y, w, h = (parse_float(v, path, line, "box coordinate") for v in values)
    if not all(math.isfinite(v) and abs(v) <= MAX_IMAGE_SIDE for v in (x, y, w, h)) or w <= 0 or h <= 0:
        raise IndexFileError(
            f"{path}, line {line}: box x={x:g} y={y:g} width={w:g} height={h:g} must be numbers within "
            f"±{MAX_IMAGE_SIDE} (the largest side of a JPEG) with a positive width and height (a damaged index "
            "file?)"
        )
    return [x, y, w, h]


def image_relpath(value: str, where: str) -> str:
    """``value``, an image path read from an index file (``where``: the file and line), when it is a plain path
    relative to the dataset root; it is then the normalised form that duplicates are compared in.

    Raises:
        IndexFileError: an absolute path, a ``..`` part (both would read an image outside the dataset root), or
            another spelling of a path (``./``, ``//``, a trailing ``/``: the same image could be listed twice
            under two names).
    """
    if not value:
        raise IndexFileError(f"{where}: the image path is empty")
    if value.startswith(("/", "\\")) or PureWindowsPath(value).drive:
        raise IndexFileError(
            f"{where}: image path {value!r} is absolute; an index file lists paths relative to the dataset "
            "root (a damaged or foreign index file?)"
        )
    if ".." in value.split("/"):
        raise IndexFileError(
            f"{where}: image path {value!r} has a '..' part and would read an image outside the dataset root; "
            "an index file lists paths inside it"
        )
    normal = posixpath.normpath(value)
    if normal != value:
        raise IndexFileError(
            f"{where}: image path {value!r} is another spelling of {normal!r}; write it as {normal!r} (two "
            "spellings would let one image be listed twice)"
        )
    return value


def read_id_table(
    path: Path, columns: int, what: str, maxsplit: int = -1
) -> dict[int, tuple[int, list[str]]]:
    """``{image id: (line, fields)}`` of an index file whose first column is an integer image id (``maxsplit``
    as in :func:`read_rows`).

    Raises:
        DuplicateImageIdError: an id listed twice (naming both lines).
        IndexFileError: a short line or a non-integer id.
    """
    table: dict[int, tuple[int, list[str]]] = {}
    for number, fields in read_rows(path, columns=columns, what=what, maxsplit=maxsplit):
        key = parse_int(fields[0], path, number, "image id")
        if key in table:
            raise DuplicateImageIdError(
                f"{path}, line {number}: image id {key} is already listed on line {table[key][0]}; "
                "each image may appear once (a duplicate would put one image under two entries)"
            )
        table[key] = (number, fields)
    return table


def check_unique(items: list[tuple[str, int]], path: Path, what: str) -> None:
    """Raise DuplicateImageIdError if a value of ``(value, line)`` pairs repeats."""
    seen: dict[str, int] = {}
    for value, number in items:
        if value in seen:
            raise DuplicateImageIdError(
                f"{path}, line {number}: {what} {value} is already listed on line {seen[value]}; "
                "each image may appear once"
            )
        seen[value] = number
