"""Files dmllab writes and reads back: errors that name the file, content checksums, damaged entries set aside.

* :func:`naming` turns an OSError raised without a file name (a full disk during ``write``, torch's own "unexpected
  pos" error when ``torch.save`` cannot write) into one that names the file and says whether it was being read or
  written, so that :func:`dmllab.errors.error_message` can say "no space left on device writing <file>".
* :func:`write_atomic`, :func:`atomic_open` and :func:`replacing`: the one way dmllab writes a file: whole or not
  at all (a temporary file of a random name in the same folder, ``fsync``, ``os.replace``; the temporary file
  removed on any error), so a link planted at the path is replaced, never written through.
* :func:`regular_file`: a file dmllab reads must be a regular file (a FIFO, a device, a dangling link: a named
  error, never a hang).
* :func:`sha256_file` and the checksum sidecar (``<file>.sha256``, :func:`write_sidecar` / :func:`check_sidecar`):
  a torch checkpoint is a zip archive whose CRCs ``torch.load`` does not check, so a flipped byte in a tensor loads
  silently; the sidecar written with the file catches it.
* :func:`content_fingerprint`: a cheap fingerprint (CRC-32 and size) of a large cache file (generated images,
  cached features), computed once per process and file state and compared with the one recorded when the cache was
  written, so a cache damaged or edited in place is noticed when it is opened.
* :func:`set_aside` moves a damaged entry (run folder, cache folder, checkpoint) next to where it was, under a name
  that no reader picks up, and says so on stderr: never deleted, and the caller treats it as missing.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import shutil
import stat
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SIDECAR_SUFFIX = ".sha256"
_CHUNK = 1 << 20
# content_fingerprint per (path, inode, size, mtime, ctime): a file is read once per process while unchanged.
_FINGERPRINTS: dict[tuple, str] = {}


class CorruptFileError(ValueError):
    """A file dmllab wrote earlier does not hold what was written (checksum, format or key mismatch); the message
    names the file and what to do."""


def warn(message: str) -> None:
    """One line ``dmllab: warning: <message>`` on stderr (how dmllab reports what it repaired by itself)."""
    print(f"dmllab: warning: {' '.join(message.split())}", file=sys.stderr, flush=True)


def notice(message: str) -> None:
    """One line ``dmllab: <message>`` on stderr (what dmllab does before a long first-use build)."""
    print(f"dmllab: {' '.join(message.split())}", file=sys.stderr, flush=True)


#: A first-use build estimated to take at least this long (seconds) is announced by :func:`first_use`.
LONG_BUILD_S = 10.0


def first_use(what: str, seconds: float) -> None:
    """Say on stderr (:func:`notice`) that dmllab builds ``what`` once and that it takes about ``seconds``, when
    that is at least :data:`LONG_BUILD_S`."""
    if seconds >= LONG_BUILD_S:
        notice(f"first use: {what}, once: about {duration(seconds)}")


def duration(seconds: float) -> str:
    """``40 s`` below 90 s, ``2.5 min`` from there, ``3.2 h`` from two hours (how dmllab writes an estimate)."""
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


@contextmanager
def naming(path: str | os.PathLike, action: str) -> Iterator[None]:
    """Re-raise an OSError of the block with ``path`` as its file name and ``action`` ("reading" or "writing")
    as its ``dmllab_action`` attribute where it has none; a RuntimeError of ``torch.save``'s zip writer
    ("unexpected pos", "PytorchStreamWriter failed") or numpy's short-write OSError without errno becomes the
    OSError it stands for (ENOSPC when the folder has no room left, else EIO)."""
    try:
        yield
    except OSError as err:
        if err.filename is None and err.errno is None and action == "writing":
            # numpy's own short-write error ("737280 requested and 98176 written") carries no errno
            raise _named(_short_write_errno(Path(path)), path, action) from err
        if err.filename is None and err.errno is not None:
            new = OSError(err.errno, err.strerror or os.strerror(err.errno), str(path))
            new.dmllab_action = action  # type: ignore[attr-defined]
            raise new from err
        if not hasattr(err, "dmllab_action"):
            err.dmllab_action = action  # type: ignore[attr-defined]
        raise
    except RuntimeError as err:
        text = str(err)
        if action != "writing" or not ("unexpected pos" in text or "PytorchStreamWriter" in text):
            raise
        raise _named(_short_write_errno(Path(path)), path, action) from err


def _named(code: int, path: str | os.PathLike, action: str) -> OSError:
    new = OSError(code, os.strerror(code), str(path))
    new.dmllab_action = action  # type: ignore[attr-defined]
    return new


def _short_write_errno(path: Path) -> int:
    """What a write that stopped short without an errno ran into: EFBIG when the file reached the process's
    file-size limit (``ulimit -f``), ENOSPC when its folder has no room left, else EIO."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if limit != resource.RLIM_INFINITY and size >= limit - _CHUNK:  # within a write of the limit
        return errno.EFBIG
    return errno.ENOSPC if _no_room(path.parent) else errno.EIO


def _no_room(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return True
    return st.f_bavail * st.f_frsize < 64 << 20  # less than 64 MiB left: the write ran out of room


def _temporary(path: Path, suffix: str = "") -> tuple[int, Path]:
    """A new empty file next to ``path`` under a random name ending in ``suffix`` (``O_EXCL``: never an existing
    file or a planted link), mode 0o666 less the umask; its descriptor (open for writing) and its path."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp{suffix}"
    with naming(path, "writing"):
        return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666), tmp


def _drop(tmp: Path) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


@contextmanager
def replacing(path: str | os.PathLike, *, keep_partial: bool = False, suffix: str = "") -> Iterator[Path]:
    """The one way dmllab writes a file: the block writes the temporary file it is given (next to ``path``, created
    by :func:`_temporary`), which then replaces ``path`` (``os.replace``: a link at ``path`` is replaced, never
    written through). When the block fails the temporary file is removed, or, with ``keep_partial`` (an executed
    notebook, a log: what was written says where it failed), moved into place all the same. ``suffix`` ends the
    temporary file's name, for a writer that goes by it (papermill: ``.ipynb``)."""
    path = Path(path)
    fd, tmp = _temporary(path, suffix)
    os.close(fd)
    try:
        yield tmp
    except BaseException:
        if keep_partial:
            with naming(path, "writing"):
                os.replace(tmp, path)
        else:
            _drop(tmp)
        raise
    try:
        with naming(path, "writing"):
            os.replace(tmp, path)
    except BaseException:
        _drop(tmp)
        raise


@contextmanager
def new_folder(final: Path, marker: str) -> Iterator[Path]:
    """A new temporary folder beside ``final`` (mode 0755: ``mkdtemp`` makes it private, a cache is shared) that the
    block fills and that is then renamed to ``final``; a lost race (another process published ``final/marker``
    first) discards it, and so does an error in the block."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        tmp.chmod(0o755)
        yield tmp
        try:
            os.replace(tmp, final)
        except OSError:
            if not (final / marker).is_file():  # not a lost race: a real error
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", **kwargs: Any) -> Iterator[Any]:
    """``open(path, mode)`` written the one safe way (:func:`replacing`): the file is flushed to disk (``fsync``) and
    moved over ``path`` when the block ends; on an error ``path`` keeps what it held."""
    path = Path(path)
    with replacing(path) as tmp, naming(path, "writing"):
        with open(tmp, mode.replace("x", "w"), **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


def write_atomic(path: str | os.PathLike, data: bytes) -> bool:
    """Write ``data`` to ``path`` whole or not at all, unless ``path`` already holds exactly these bytes; returns
    whether it wrote.

    The bytes go to a temporary file in the same folder (:func:`replacing`: mode 0o666 less the umask, like an
    ordinary write), are flushed to disk (``fsync``) and moved over ``path`` (``os.replace``: a link at ``path`` is
    replaced, never followed); on any error the temporary file is removed and the error names ``path``
    (:func:`naming`: a full disk, a file-size limit)."""
    path = Path(path)
    with naming(path, "reading"):
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size == len(data) and path.read_bytes() == data:
                return False
        except FileNotFoundError:
            pass
    fd, tmp = _temporary(path)
    try:
        with naming(path, "writing"):
            try:
                view = memoryview(data)
                while view:  # os.write may write fewer bytes than asked: the rest follows (or its error)
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
    except BaseException:
        _drop(tmp)
        raise
    return True


def write_text_atomic(path: str | os.PathLike, text: str) -> bool:
    """:func:`write_atomic` of ``text`` in UTF-8."""
    return write_atomic(path, text.encode("utf-8"))


class NotRegularFileError(OSError):
    """A path dmllab reads is not a regular file (a FIFO, a device, a folder, a socket); the message names it."""


def regular_file(path: str | os.PathLike, what: str = "file", why: str = "") -> Path:
    """``path`` when it is a regular file (a link to one counts); otherwise an OSError naming it and what it is
    (missing, a dangling link, a folder, a FIFO, a device, a socket), so that dmllab never blocks reading a FIFO or
    reads an endless device. ``why`` ends the message of a path that is not a regular file (why a stream cannot
    be read there, what to do).

    Raises:
        FileNotFoundError: ``path`` does not exist (or is a link to nothing: "a dangling link to <target>").
        NotRegularFileError: ``path`` is not a regular file.
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            target = os.readlink(path)
            raise FileNotFoundError(
                f"{what} {path} is a dangling link (to {target}, which does not exist)"
            ) from None
        raise FileNotFoundError(f"{what} {path} does not exist") from None
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise NotRegularFileError(
            f"{what} {path} is {kind}, not a regular file" + (f"; {why}" if why else "")
        )
    return path


_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 hex digest of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with naming(path, "reading"), open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sidecar(path: str | os.PathLike) -> Path:
    """Where the checksum of ``path`` is kept: ``<path>.sha256``."""
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def write_sidecar(path: str | os.PathLike, digest: str | None = None) -> str:
    """Write ``<path>.sha256`` (atomically) for the file ``path`` as it is now; returns the digest."""
    digest = digest or sha256_file(path)
    write_atomic(sidecar(path), (digest + "\n").encode())
    return digest


def check_sidecar(path: str | os.PathLike, what: str = "file") -> str | None:
    """Verify ``path`` against its sidecar, if it has one; returns the digest (None without a sidecar).

    Raises CorruptFileError: the file's bytes differ from those the sidecar was written for."""
    side = sidecar(path)
    try:
        expected = side.read_text().strip()
    except FileNotFoundError:
        return None
    digest = sha256_file(path)
    if digest != expected:
        raise CorruptFileError(
            f"{what} {path} does not match the checksum written with it ({side}): the file was damaged or "
            "replaced after it was written"
        )
    return digest


def set_aside(path: str | os.PathLike, reason: str, *, then: str = "it is treated as missing") -> Path | None:
    """Move the damaged entry ``path`` (a file or a folder) to ``<parent>/corrupt-<name>-<UTC time>`` and say so on
    stderr (naming both paths and ``reason``); returns the new path, or None when it could not be moved (a
    read-only store: the warning says so, and the entry stays)."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"corrupt-{path.name.lstrip('.')}-{stamp}-{os.getpid()}")
    try:
        os.replace(path, aside)
        for extra in (sidecar(path),):  # a checkpoint's checksum goes with it
            if extra.exists():
                os.replace(extra, sidecar(aside))
    except FileNotFoundError:  # another process moved it first
        return None
    except OSError as err:
        warn(f"{path} is damaged ({reason}) and cannot be moved aside ({err.strerror or err}); {then}")
        return None
    warn(f"{path} is damaged ({reason}); moved it to {aside}; {then}")
    return aside


def content_fingerprint(path: str | os.PathLike) -> str:
    """``"crc32:<8 hex digits>:<size>"`` of the file's bytes: CRC-32 reads about 1.5 GB/s, against about 0.7 for
    sha256 (a cache is checked against damage, not against an adversary). Memoised per process while the file's
    inode, size, modification and change times stay the same (any write changes its change time)."""
    path = Path(path)
    with naming(path, "reading"):
        st = os.stat(path)
        key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key in _FINGERPRINTS:
            return _FINGERPRINTS[key]
        crc = 0
        if st.st_size:
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
                crc = zlib.crc32(view)
    digest = f"crc32:{crc:08x}:{st.st_size}"
    _FINGERPRINTS[key] = digest
    return digest


def check_fingerprints(folder: str | os.PathLike, expected: dict[str, str], what: str) -> None:
    """Compare every ``name -> fingerprint`` of ``expected`` with :func:`content_fingerprint` of
    ``folder/name``.

    Raises CorruptFileError: naming the first file that differs (or is missing) and ``what`` it belongs to."""
    for name, digest in expected.items():
        path = Path(folder) / name
        if not path.is_file():
            raise CorruptFileError(f"{what}: {path} is missing")
        if content_fingerprint(path) != digest:
            raise CorruptFileError(f"{what}: {path} changed after it was written (its fingerprint differs)")
