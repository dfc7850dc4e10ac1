"""Files dmllab writes and reads back: errors that name the file, content checksums, damaged entries set aside.

* :func:`naming` turns an OSError raised without a file name (a full disk during ``write``, torch's own "unexpected
  pos" error when ``torch.save`` cannot write) into one that names the file and says whether it was being read or
  written, so that :func:`dmllab.errors.error_message` can say "no space left on device writing <file>".
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
import sys
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
            code = errno.ENOSPC if _no_room(Path(path).parent) else errno.EIO
            new = OSError(code, os.strerror(code), str(path))
            new.dmllab_action = action  # type: ignore[attr-defined]
            raise new from err
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
        code = errno.ENOSPC if _no_room(Path(path).parent) else errno.EIO
        new = OSError(code, os.strerror(code), str(path))
        new.dmllab_action = action  # type: ignore[attr-defined]
        raise new from err


def _no_room(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return True
    return st.f_bavail * st.f_frsize < 64 << 20  # less than 64 MiB left: the write ran out of room


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
    side = sidecar(path)
    tmp = side.with_name(f".{side.name}.tmp-{os.getpid()}")
    with naming(tmp, "writing"):
        tmp.write_text(digest + "\n")
    os.replace(tmp, side)
    return digest


def check_sidecar(path: str | os.PathLike, what: str = "file") -> str | None:
    """Verify ``path`` against its sidecar, if it has one; returns the digest (None without a sidecar).

    Raises:
        CorruptFileError: the file's bytes differ from those the sidecar was written for.
    """
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

    Raises:
        CorruptFileError: naming the first file that differs (or is missing) and ``what`` it belongs to.
    """
    for name, digest in expected.items():
        path = Path(folder) / name
        if not path.is_file():
            raise CorruptFileError(f"{what}: {path} is missing")
        if content_fingerprint(path) != digest:
            raise CorruptFileError(f"{what}: {path} changed after it was written (its fingerprint differs)")
