"""Downloading one archive for ``dmllab data fetch``: resumable, bounded in time, and named when it fails.

``requests`` (with urllib3's ``Retry``) makes the connection: redirects, retries of a refused or reset connection
and of HTTP 429/5xx answers with back-off. What no library does is kept here: the download goes to
``<file>.part``, and a transfer that stops part-way is resumed from the bytes already there with an HTTP
``Range`` request (within the call, then by a re-run); a server that ignores Range sends the whole file again.

Every download is bounded (:class:`DownloadLimits`): no read waits longer than ``stall_s``, the transfer must
average at least ``min_rate`` bytes per second over every ``window_s``, and the whole download (retries included)
ends by ``deadline_s``. A server trickling a byte every few seconds therefore ends in :class:`DownloadError` after
at most ``window_s + stall_s``, and any download by ``deadline_s + stall_s``; the ``.part`` is kept for a re-run.
"""

from __future__ import annotations

import errno
import http.client
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmllab.data.sources import DownloadError
from dmllab.fileio import naming

CHUNK = 1 << 20  # bytes per read at most
RETRY_WAIT_S = 2.0  # back-off factor between attempts (seconds)


@dataclass(frozen=True)
class DownloadLimits:
    """How long a download may take (module docstring).

    Args:
        deadline_s: the whole download, retries included, ends with an error after this many seconds.
        min_rate: bytes per second the transfer must average over every ``window_s``.
        window_s: the window over which ``min_rate`` is measured.
        stall_s: the longest wait for a connection or for the next bytes (the socket timeout).
    """

    deadline_s: float = 6 * 3600.0
    min_rate: float = 16 * 1024.0
    window_s: float = 120.0
    stall_s: float = 60.0


class _Transient(Exception):
    """A transfer that stopped part-way (reset, timeout, a short body): worth resuming."""


def _content_range_start(header: str | None) -> int | None:
    """The first byte of ``Content-Range: bytes START-END/TOTAL``, None if absent or malformed."""
    if not header or not header.startswith("bytes "):
        return None
    try:
        return int(header[6:].split("-", 1)[0])
    except ValueError:
        return None


def _session(retries: int):
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    session = requests.Session()
    retry = Retry(
        total=retries,
        read=0,  # a body that stops part-way is resumed by download(), not restarted by urllib3
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=frozenset({"GET"}),
        backoff_factor=RETRY_WAIT_S,
        raise_on_status=False,
    )
    for prefix in ("http://", "https://"):
        session.mount(prefix, HTTPAdapter(max_retries=retry))
    return session


def _write_error(err: OSError, part: Path) -> DownloadError:
    """A failed write of the ``.part`` as one line naming it; a file-size limit also removes it."""
    got = part.stat().st_size if part.exists() else 0
    if err.errno == errno.EFBIG:
        part.unlink(missing_ok=True)
        return DownloadError(
            f"cannot write {part}: the file-size limit (ulimit -f, or the file system's) stops it at {got} bytes; "
            "the partial file was removed: pass --downloads on a file system without that limit"
        )
    what = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}.get(
        err.errno or 0, err.strerror or str(err)
    )
    return DownloadError(
        f"cannot write {part}: {what} after {got} bytes; free some space or pass --downloads on a disk with room, "
        "then re-run to resume (or delete the .part)"
    )


class _Clock:
    """The deadline and the minimum rate of one download (:class:`DownloadLimits`)."""

    def __init__(self, url: str, part: Path, limits: DownloadLimits) -> None:
        self.url, self.part, self.limits = url, part, limits
        self.start = time.monotonic()
        self.mark: tuple[float, int] | None = None

    def check(self, got: int) -> None:
        now = time.monotonic()
        kept = f"{self.part} ({got} bytes) is kept: re-run the same command to resume it"
        if now - self.start > self.limits.deadline_s:
            raise DownloadError(
                f"download of {self.url} did not finish within {self.limits.deadline_s:g} s (the deadline); {kept}"
            )
        if self.mark is None:
            self.mark = (now, got)
            return
        since, had = self.mark
        if now - since >= self.limits.window_s:
            rate = (got - had) / (now - since)
            if rate < self.limits.min_rate:
                raise DownloadError(
                    f"download of {self.url} is too slow: {rate:.2g} B/s over the last {now - since:.0f} s, "
                    f"below the minimum {self.limits.min_rate:g} B/s; {kept}"
                )
            self.mark = (now, got)


def byte_bar(desc: str, total: int | None, progress: bool, initial: int = 0) -> Any:
    """A tqdm progress bar of bytes on stderr (shown only with ``progress``)."""
    from tqdm.auto import tqdm

    kw = dict(unit="B", unit_scale=True, unit_divisor=1024, disable=not progress, file=sys.stderr)
    return tqdm(total=total, initial=initial, desc=desc, **kw)


def _download_once(session, url: str, part: Path, clock: _Clock, stall_s: float, progress: bool) -> None:
    """Append the rest of ``url`` to ``part`` (a Range request when ``part`` holds bytes already).

    Raises:
        DownloadError: an HTTP error status, an HTML page instead of the file, a write error, the deadline or the
            minimum rate (not worth retrying).
        _Transient: the transfer stopped part-way.
    """
    import requests
    import urllib3

    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "dmllab-fetch", "Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = session.get(url, headers=headers, stream=True, timeout=(stall_s, stall_s))
    except requests.RequestException as err:
        raise DownloadError(
            f"cannot download {url} ({type(err).__name__}: {err}); check the network, or download the file "
            "elsewhere and pass it with --from"
        ) from None
    with response:
        if response.status_code == 416 and have:  # the .part already holds every byte: the checksum decides
            return
        if response.status_code >= 400:
            raise DownloadError(
                f"{url} answered HTTP {response.status_code} {response.reason}; check the URL, or download the "
                "file elsewhere and pass it with --from"
            )
        if "text/html" in response.headers.get("Content-Type", ""):
            raise DownloadError(
                f"{url} sent an HTML page instead of the file (a sign-in, quota or 'file moved' page?); "
                "download the file in a browser and pass it with --from"
            )
        resumed = (
            response.status_code == 206
            and _content_range_start(response.headers.get("Content-Range")) == have
        )
        if have and not resumed:
            have = 0  # the server ignored the Range request: start again
        length = response.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        got = have
        with (
            _open_part(part, append=bool(have)) as out,
            byte_bar(part.name.removesuffix(".part"), total, progress, initial=have) as bar,
        ):
            while True:
                clock.check(got)
                try:  # read1: whatever has arrived, so that the clock is checked between trickled bytes
                    chunk = response.raw.read1(CHUNK, decode_content=False)
                except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as err:
                    raise _Transient(f"{type(err).__name__}: {err}") from None
                if not chunk:
                    break
                try:
                    out.write(chunk)
                    out.flush()
                except OSError as err:
                    raise _write_error(err, part) from None
                got += len(chunk)
                bar.update(len(chunk))
    if total is not None and got < total:
        raise _Transient(f"the connection closed after {got} of {total} bytes")


def download(
    url: str, target: Path, *, retries: int = 3, progress: bool = True, limits: DownloadLimits | None = None
) -> Path:
    """Download ``url`` into ``target.part`` and return that path (the caller renames it to ``target`` once
    its checksum matched). An existing ``.part`` of an earlier run is resumed; an interrupted transfer is
    resumed ``retries`` times within this call (and a refused connection or a 429/5xx answer retried as often).

    Raises:
        DownloadError: one line naming the URL (or the ``.part`` that could not be written); a ``.part`` that
            holds bytes is kept so that a re-run resumes it.
    """
    limits = limits or DownloadLimits()
    part = target.with_name(target.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    clock = _Clock(url, part, limits)
    session = _session(retries)
    try:
        for attempt in range(retries + 1):
            try:
                _download_once(session, url, part, clock, limits.stall_s, progress)
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
            except DownloadError:
                if part.exists() and part.stat().st_size == 0:
                    part.unlink()
                raise
    finally:
        session.close()
    raise AssertionError("unreachable")  # the last attempt returns or raises


def _open_part(part: Path, *, append: bool) -> Any:
    """The partial download ``part`` opened for appending (or truncated), refusing a link planted at its path
    (``O_NOFOLLOW``: ELOOP names it) so a download never writes through one."""
    with naming(part, "writing"):
        return open(part, "ab" if append else "wb", opener=_no_follow)


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)
