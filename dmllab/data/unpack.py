"""Unpacking a dataset archive without trusting it.

dmllab checks every member itself and writes every file itself; it never relies on the interpreter's
``tarfile`` extraction filters (``filter="data"`` is not enforced by every Python in use: CVE-2025-4517 was fixed
in 3.9.23, 3.10.18, 3.11.13, 3.12.11 and 3.13.4; the filter would also apply the members' modes, and zipfile has
none). A dataset archive holds folders and regular files only, so:

* the format is read from the content (magic bytes) and must be the one its published name says (a tar named
  ``img.zip`` is refused), :class:`ArchiveFormatError`;
* a symbolic link, hard link, device, FIFO or any other kind of member is refused, and so is an absolute name or
  one with a ``..`` part, :class:`UnsafeArchiveError`; each file is created with ``O_NOFOLLOW`` at a resolved
  path that must lie inside the temporary folder;
* the entries and the bytes written are bounded by the archive's ``max_entries`` and ``max_bytes``
  (:class:`~dmllab.data.sources.Archive`): a decompression bomb stops with :class:`ArchiveTooLargeError` before
  it fills the disk.

Files are written with mode ``0o666`` and folders with ``0o777``, less the umask; the members' own modes, owners
and times are not applied.
"""

from __future__ import annotations

import lzma
import os
import shutil
import stat
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from dmllab.data.sources import Archive, FetchError
from dmllab.fileio import naming

CHUNK = 1 << 20
# Leading bytes of each format (the compressed tar formats are recognised by their compression).
_MAGIC = (
    (b"\x1f\x8b", "tar", "gzip-compressed tar"),
    (b"BZh", "tar", "bzip2-compressed tar"),
    (b"\xfd7zXZ\x00", "tar", "xz-compressed tar"),
    (b"PK\x03\x04", "zip", "zip"),
    (b"PK\x05\x06", "zip", "zip"),
)
_TAR_NAMES = (".tar", ".tgz", ".tar.gz", ".tbz2", ".tar.bz2", ".txz", ".tar.xz")


class ArchiveFormatError(FetchError):
    """An archive's content is not the format its name says (or neither tar nor zip)."""


class UnsafeArchiveError(FetchError):
    """An archive member that a dataset archive never holds: a link, a device, a FIFO, or a name outside the
    folder it is unpacked into."""


class ArchiveTooLargeError(FetchError):
    """Unpacking would write more entries or bytes than the archive's bounds allow."""


def detect_format(path: Path) -> tuple[str, str]:
    """``(format, description)`` of the file's content: ``("tar", "gzip-compressed tar")``, ``("zip", "zip")``,
    ``("tar", "tar")`` for an uncompressed tar, ``("", "")`` for anything else."""
    with open(path, "rb") as fh:
        head = fh.read(512)
    for magic, fmt, detail in _MAGIC:
        if head.startswith(magic):
            return fmt, detail
    if head[257:262] == b"ustar":
        return "tar", "tar"
    return "", ""


def expected_format(filename: str) -> str:
    """The format a published file name says: ``tar``, ``zip``, or ``""``."""
    name = filename.lower()
    if name.endswith(".zip"):
        return "zip"
    return "tar" if name.endswith(_TAR_NAMES) else ""


def _member_parts(name: str, archive: str) -> list[str]:
    """The path parts of a member name (``.`` and empty parts dropped), refusing absolute names and ``..``."""
    if "\x00" in name:
        raise UnsafeArchiveError(
            f"{archive}: member {name!r} has a NUL byte in its name; refusing the archive"
        )
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(
            f"{archive}: member {name!r} has an absolute name; a dataset archive never does, refusing it"
        )
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(
            f"{archive}: member {name!r} points outside the folder it is unpacked into ('..'); refusing the archive"
        )
    return parts


class _Writer:
    """Writes members below ``staging`` and keeps the bounds (entries, bytes)."""

    def __init__(self, archive: Archive, path: Path, staging: Path) -> None:
        self.archive, self.path = archive, path
        self.staging = Path(os.path.realpath(staging))
        self.entries = 0
        self.bytes = 0

    def _target(self, name: str) -> Path | None:
        parts = _member_parts(name, self.archive.filename)
        if not parts:
            return None
        target = self.staging.joinpath(*parts)
        resolved = os.path.realpath(target)
        if os.path.commonpath([resolved, str(self.staging)]) != str(self.staging):
            raise UnsafeArchiveError(
                f"{self.archive.filename}: member {name!r} resolves to {resolved}, outside the folder it is "
                "unpacked into; refusing the archive"
            )
        return target

    def admit(self, name: str, size: int) -> None:
        """Account for one more entry of ``size`` bytes (its declared size) before it is written."""
        self.entries += 1
        limit = self.archive.max_entries
        if limit is not None and self.entries > limit:
            raise ArchiveTooLargeError(
                f"{self.path}: more than {limit} entries (at {name!r}); {self.archive.filename} holds fewer: "
                "refusing it (a decompression bomb, or not the published archive)"
            )
        self.grow(name, size)

    def grow(self, name: str, size: int) -> None:
        """Refuse ``size`` more bytes beyond what was written when that passes ``max_bytes``."""
        limit = self.archive.max_bytes
        if limit is not None and self.bytes + size > limit:
            raise ArchiveTooLargeError(
                f"{self.path}: unpacking {name!r} would write more than {limit} bytes; "
                f"{self.archive.filename} holds fewer: refusing it (a decompression bomb, or not the published "
                "archive)"
            )

    def folder(self, name: str) -> None:
        target = self._target(name)
        if target is not None:
            with naming(target, "writing"):
                target.mkdir(parents=True, exist_ok=True)

    def file(self, name: str, source: IO[bytes]) -> None:
        target = self._target(name)
        if target is None:
            raise UnsafeArchiveError(
                f"{self.archive.filename}: a file member has no name; refusing the archive"
            )
        with naming(target, "writing"):
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
            with os.fdopen(fd, "wb") as out:
                while chunk := source.read(CHUNK):
                    self.grow(name, len(chunk))  # the bytes actually written, whatever was declared
                    self.bytes += len(chunk)
                    out.write(chunk)


def _kind(member: tarfile.TarInfo) -> str:
    for test, word in (
        (member.issym, "a symbolic link"),
        (member.islnk, "a hard link"),
        (member.ischr, "a character device"),
        (member.isblk, "a block device"),
        (member.isfifo, "a FIFO"),
    ):
        if test():
            return word
    return f"a member of type {member.type!r}"


def _tar_members(tar: tarfile.TarFile, writer: _Writer) -> Iterator[str]:
    for member in tar:
        writer.admit(member.name, member.size if member.isreg() else 0)
        if member.isdir():
            writer.folder(member.name)
        elif member.isreg():
            source = tar.extractfile(member)
            assert source is not None  # a regular member always has data
            with source:
                writer.file(member.name, source)
        else:
            raise UnsafeArchiveError(
                f"{writer.archive.filename}: member {member.name!r} is {_kind(member)}; a dataset archive holds "
                "folders and files only, refusing it"
            )
        yield member.name


def _zip_members(zf: zipfile.ZipFile, writer: _Writer) -> Iterator[str]:
    infos = zf.infolist()
    # the central directory lists every entry and its size: the bounds are checked before anything is written
    declared = _Writer(writer.archive, writer.path, writer.staging)
    for info in infos:
        declared.admit(info.filename, info.file_size)
        declared.bytes += info.file_size
    for info in infos:
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            what = "a symbolic link" if kind == stat.S_IFLNK else f"a member of file type {oct(kind)}"
            raise UnsafeArchiveError(
                f"{writer.archive.filename}: member {info.filename!r} is {what}; a dataset archive holds folders "
                "and files only, refusing it"
            )
        writer.admit(info.filename, 0)  # the bytes are counted as they are written
        if info.is_dir():
            writer.folder(info.filename)
        else:
            with zf.open(info) as source:
                writer.file(info.filename, source)
        yield info.filename


def unpack(archive: Archive, path: Path, staging: Path, progress: bool = False) -> None:
    """Put ``path`` into ``staging``: extract it (tar or zip, module docstring), or copy it to
    ``staging / archive.place``.

    Raises:
        ArchiveFormatError, UnsafeArchiveError, ArchiveTooLargeError: one line naming the file and the member.
        FetchError: a damaged archive. OSError: a failed write, naming the file.
    """
    from tqdm.auto import tqdm

    if archive.place:
        dest = staging / archive.place
        with naming(dest, "writing"):
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
        return
    found, detail = detect_format(path)
    expected = expected_format(archive.filename)
    if not found:
        raise ArchiveFormatError(f"{path} is neither a tar nor a zip archive; is it {archive.filename}?")
    if expected and found != expected:
        raise ArchiveFormatError(
            f"{path} is a {detail} archive, but {archive.filename} is published as a {expected} archive; "
            "refusing it: is it the published file?"
        )
    writer = _Writer(archive, path, staging)
    bar = tqdm(desc=f"unpacking {archive.filename}", unit="file", disable=not progress, file=sys.stderr)
    try:
        if found == "tar":
            with tarfile.open(path, mode="r:*") as tar:
                for _ in _tar_members(tar, writer):
                    bar.update()
        else:
            with zipfile.ZipFile(path) as zf:
                for _ in _zip_members(zf, writer):
                    bar.update()
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError) as err:
        raise FetchError(
            f"cannot unpack {path} ({type(err).__name__}: {err}); is the file complete?"
        ) from None
    except (RuntimeError, NotImplementedError) as err:  # zipfile: an encrypted member, an unknown compression
        raise FetchError(f"cannot unpack {path} ({err}); is it the published {archive.filename}?") from None
    except UnicodeDecodeError as err:  # zipfile: a member name flagged UTF-8 that is not
        raise FetchError(
            f"cannot unpack {path}: a member's name is not UTF-8 (byte {err.start} of the name "
            f"{err.object[:60]!r}); is it the published {archive.filename}?"
        ) from None
    finally:
        bar.close()
