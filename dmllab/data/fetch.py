"""``dmllab data fetch``: download (or take from disk) a real benchmark's archives, verify them, unpack them
into the layout the loaders of :mod:`dmllab.data.real` read, and hand the folder to ``dmllab data check``.

The datasets and their archives are :data:`dmllab.data.sources.SOURCES`; downloading is
:mod:`dmllab.data.download` (resumable, with a deadline and a minimum rate) and unpacking
:mod:`dmllab.data.unpack` (every member checked by dmllab, bounded against decompression bombs).

Nothing is half-made: an archive is downloaded to ``<file>.part`` next to its target (a re-run resumes it), renamed
only once its checksum matches, unpacked into a temporary folder ``.<ROOT name>.fetch-<pid>-<random>`` beside the
dataset folder, and that folder is renamed into place only when every archive verified and the index files the
loader needs are there. A failure removes the temporary folder; a bad checksum also removes the download. A fetch
holds a lock on ROOT (``.<ROOT name>.fetch.lock`` beside it, naming its holder): a second fetch into the same ROOT
says who holds it and stops, and the fetch that holds it removes the temporary folders a killed fetch left behind.
ROOT is never a symbolic link, and its mode follows the umask.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from dmllab.data.base import DATASETS
from dmllab.data.download import DownloadLimits, byte_bar, download
from dmllab.data.sources import (
    SOURCES,
    Archive,
    ChecksumError,
    Copy,
    DatasetSource,
    FetchError,
    ManualDownloadError,
)
from dmllab.data.unpack import unpack
from dmllab.fileio import regular_file
from dmllab.locks import LockTimeout, describe, exclusive, read_holder

MANIFEST = "dmllab_fetch.json"
CHUNK = 1 << 20  # bytes per read while hashing


# Why --from needs a file: its checksum is read first, its members after, and a zip archive is read by seeking.
_NO_STREAM = (
    "an archive is read twice (its checksum, then its members) and a zip archive by seeking, so a pipe or a process "
    "substitution cannot be read: save it to a file and pass that"
)


def digests(path: Path, progress: bool = False) -> dict[str, str]:
    """``{"md5": ..., "sha256": ...}`` of a file, read once."""
    md5, sha256 = hashlib.md5(), hashlib.sha256()
    with open(path, "rb") as fh, byte_bar(f"verifying {path.name}", path.stat().st_size, progress) as bar:
        while chunk := fh.read(CHUNK):
            md5.update(chunk)
            sha256.update(chunk)
            bar.update(len(chunk))
    return {"md5": md5.hexdigest(), "sha256": sha256.hexdigest()}


def verify(archive: Archive, path: Path, found: dict[str, str]) -> bool:
    """True when ``archive`` has a published checksum and ``found`` (from :func:`digests`) matches it; False
    when none is published.

    Raises ChecksumError: the checksum differs (naming the file, both digests and the checksum's source)."""
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


def _check_root_free(root: Path) -> bool:
    """True if ``root`` holds a finished fetch (its manifest); raise if it holds anything else or is a link."""
    if root.is_symlink():
        raise FetchError(
            f"{root} is a symbolic link; dmllab fetches into a real folder only: remove the link or give the "
            "folder it points to"
        )
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


def _staging_prefix(root: Path) -> str:
    return f".{root.name}.fetch-"


def _remove_leftovers(root: Path, echo: Callable[[str], None]) -> None:
    """Remove the temporary folders of earlier fetches into ``root`` (a fetch killed while unpacking leaves one).
    Called under the lock on ``root``: no other fetch into it runs, so every such folder is a leftover."""
    for old in sorted(root.parent.glob(_staging_prefix(root) + "*")):
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
            echo(f"removed {old}, the temporary folder of an interrupted fetch")


def _make_staging(root: Path) -> Path:
    """A new temporary folder beside ``root`` whose mode follows the umask (``mkdtemp`` would make it 0700, and
    the dataset folder renamed out of it would keep that)."""
    while True:
        staging = root.parent / f"{_staging_prefix(root)}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.mkdir(staging)  # mode 0o777 less the umask
            return staging
        except FileExistsError:
            continue


@dataclass
class FetchResult:
    """What :func:`fetch_dataset` did: the dataset folder, its manifest, and whether it was there already."""

    root: Path
    manifest: dict = field(default_factory=dict)
    already_there: bool = False


def _finished(root: Path, name: str, echo: Callable[[str], None]) -> FetchResult:
    manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("dataset") != name:
        raise FetchError(
            f"{root} holds a fetch of {manifest.get('dataset')!r}, not {name!r}; choose another folder"
        )
    echo(f"{root} holds a finished fetch of {name} ({MANIFEST}); nothing to download")
    return FetchResult(root, manifest, already_there=True)


class LockHeldError(OSError):
    """Another process fetches into the same folder; the message names it and the lock file."""


def fetch_lock(root: Path) -> Path:
    """The lock file of a fetch into ``root`` (absolute): in the cache's ``locks/`` folder, keyed by the path, so a
    dataset folder holds nothing but its data."""
    from dmllab import paths

    digest = hashlib.sha256(str(Path(root).expanduser().absolute()).encode()).hexdigest()[:16]
    return paths.cache_dir() / "locks" / f"fetch-{digest}.lock"


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
    limits: DownloadLimits | None = None,
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
            records what was found); never used by default. The archive's members are checked all the same.
        retries: resumptions of an interrupted download within this call.
        limits: the deadline and minimum rate of each download (:class:`~dmllab.data.download.DownloadLimits`).
        echo: receives one line per step (the CLI passes ``print``).

    Returns:
        :class:`FetchResult`; ``root/dmllab_fetch.json`` records every file (name, URL or path, size, md5,
        sha256, published checksum and its source, or that none is published).

    Raises:
        FetchError (bad ``--from`` file, checksum, layout, unsafe archive, non-empty ``root``),
        ManualDownloadError, DownloadError, LockHeldError (another fetch into ``root`` runs): one line each;
        ``root`` is not created and no temporary folder is left.
    """
    source = source if source is not None else SOURCES.get(name)
    root = Path(root).expanduser().absolute()
    if _check_root_free(root):
        return _finished(root, name, echo)
    given = [Path(a).expanduser().absolute() for a in archives]
    for path in given:
        try:
            regular_file(path, "--from file", _NO_STREAM)
        except OSError as err:
            raise FetchError(str(err) if os.path.lexists(path) else f"--from {path}: no such file") from None
    copy, files = choose_copy(source, given)
    made_parent = not root.parent.exists()
    lock = fetch_lock(root)
    try:
        with exclusive(lock, timeout=0, what=f"fetch into {root}"):  # the fetch itself takes no other lock
            root.parent.mkdir(parents=True, exist_ok=True)
            _remove_leftovers(root, echo)
            if _check_root_free(root):  # the other fetch finished while this one started
                return _finished(root, name, echo)
            return _fetch_locked(
                name, root, source, copy, files, downloads, keep_archives, verify_checksums, retries, limits,
                progress, echo,
            )  # fmt: skip
    except LockTimeout:
        raise LockHeldError(
            f"{root} is being fetched into by another process ({describe(read_holder(lock))}; lock {lock}): "
            "wait for that fetch to finish, then run the same command again"
        ) from None
    except BaseException:
        if made_parent:
            try:
                root.parent.rmdir()  # only if empty: a failed fetch leaves no folder behind
            except OSError:
                pass
        raise


def _fetch_locked(
    name: str,
    root: Path,
    source: DatasetSource,
    copy: Copy,
    files: dict[str, Path],
    downloads: str | Path | None,
    keep_archives: bool,
    verify_checksums: bool,
    retries: int,
    limits: DownloadLimits | None,
    progress: bool,
    echo: Callable[[str], None],
) -> FetchResult:
    """:func:`fetch_dataset` once it holds the lock on ``root``."""
    cls = DATASETS.get(name)
    if copy.note:
        echo(f"{source.name}: {copy.label} copy: {copy.note}")
    downloads = Path(downloads).expanduser().absolute() if downloads is not None else root.parent
    records, fetched = [], []
    for archive in copy.archives:
        path, how = _obtain(archive, files, downloads, retries, limits, progress, echo)
        downloaded = how == "downloaded"
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
            if how == "reused":
                raise ChecksumError(f"{err}; delete it and re-run to download it again") from None
            raise
        if downloaded:
            path = path.replace(downloads / archive.filename)
            fetched.append(path)
        if published:
            echo(
                f"{archive.filename}: {' '.join(archive.checksum)} matches the published checksum "
                f"({archive.source})"
            )
        else:
            why = "not checked (--no-verify)" if archive.checksum else "no published checksum"
            echo(f"{archive.filename}: {why}; its sha256 {found['sha256']} goes into {MANIFEST}")
        records.append(_record(archive, path, downloaded, found, published))

    staging = _make_staging(root)
    try:
        for archive in copy.archives:
            unpack(archive, files.get(archive.filename) or downloads / archive.filename, staging, progress)
        folder = staging / copy.folder if copy.folder else staging
        if folder.is_symlink() or not folder.is_dir():
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
        _check_root_free(root)  # still free, and still no link
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


def _obtain(
    archive: Archive,
    files: dict[str, Path],
    downloads: Path,
    retries: int,
    limits: DownloadLimits | None,
    progress: bool,
    echo: Callable[[str], None],
) -> tuple[Path, str]:
    """The file of ``archive`` and how it was obtained: the ``--from`` file (``"given"``), an earlier download
    (``"reused"``), or a new download (its ``.part``, ``"downloaded"``)."""
    path = files.get(archive.filename)
    target = downloads / archive.filename
    if path is not None:
        if path.name != archive.filename:
            echo(f"{archive.filename}: taking {path}")
        return path, "given"
    if target.is_file():  # verified by an earlier run that stopped later on
        echo(f"{archive.filename}: using the earlier download {target}")
        return target, "reused"
    echo(f"{archive.filename}: downloading {archive.url}")
    return download(archive.url, target, retries=retries, progress=progress, limits=limits), "downloaded"


def _record(archive: Archive, path: Path, downloaded: bool, found: dict[str, str], published: bool) -> dict:
    """The manifest's entry for one file."""
    return {
        "filename": archive.filename,
        "url": archive.url if downloaded else None,
        "from": None if downloaded else str(path),
        "bytes": path.stat().st_size,
        **found,
        "published": (
            {"algorithm": archive.checksum[0], "digest": archive.checksum[1], "source": archive.source}
            if archive.checksum
            else None
        ),
        "verified": published,
    }
