"""``dmllab data fetch`` against hostile archives and concurrent or killed fetches.

Every archive here is built in the test: links, devices and FIFOs written as tar headers (no privilege needed),
names with ``..`` or an absolute path, the CVE-2025-4517 chain of long names and links, a tar under a ``.zip`` name,
decompression bombs. Each must end in a named error with nothing written outside ROOT, no ROOT and no temporary
folder left. The unpacking never relies on ``tarfile``'s extraction filters, so the outcome is the same on every
Python.
"""

from __future__ import annotations

import copy as copying
import dataclasses
import os
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from data_layouts import make_cub, make_inshop
from hostile_archives import cve_2025_4517, member, tar_members, zip_entries
from test_fetch import run_cli, tar_gz, zip_of

from dmllab.data.fetch import SOURCES, FetchError, LockHeldError, fetch_dataset, fetch_lock
from dmllab.data.unpack import ArchiveFormatError, ArchiveTooLargeError, UnsafeArchiveError


@pytest.fixture
def place(tmp_path: Path):
    """``(data folder, outside folder)``: ROOT goes under data/; nothing may appear in outside/."""
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    return data, outside


def _assert_clean(data: Path, outside: Path, root: Path) -> None:
    assert list(outside.iterdir()) == [], "a file was written outside ROOT"
    assert not root.exists() and not root.is_symlink()
    assert list(data.iterdir()) == [], sorted(p.name for p in data.iterdir())  # no temporary folder, no lock


def _fetch_cub(given_bytes: bytes, tmp_path: Path, data: Path, **source_change):
    given = tmp_path / "CUB_200_2011.tgz"
    given.write_bytes(given_bytes)
    source = SOURCES.get("cub")
    if source_change:
        (copy,) = source.copies
        (archive,) = copy.archives
        archive = dataclasses.replace(archive, **source_change)
        source = dataclasses.replace(source, copies=(dataclasses.replace(copy, archives=(archive,)),))
    return fetch_dataset(
        "cub", data / "cub", archives=[given], source=source, verify_checksums=False, progress=False
    )


# ------------------------------------------------------------------------------------------ tar members
@pytest.mark.parametrize(
    ("members", "match"),
    [
        ([(member("CUB_200_2011", tarfile.SYMTYPE, "../outside"), None)], "is a symbolic link"),
        ([(member("CUB_200_2011", tarfile.SYMTYPE, "/nonexistent"), None)], "is a symbolic link"),
        (
            [
                (member("CUB_200_2011", tarfile.DIRTYPE), None),
                (member("CUB_200_2011/images", tarfile.SYMTYPE, "../../outside"), None),
                (member("CUB_200_2011/images/x.jpg"), b"x"),
            ],
            "is a symbolic link",
        ),
        ([(member("CUB_200_2011/passwd", tarfile.LNKTYPE, "../outside/secret"), None)], "is a hard link"),
        ([(member("../outside/escaped.txt"), b"bad")], r"outside the folder .*\('\.\.'\)"),
        ([(member("CUB_200_2011/../../outside/escaped.txt"), b"bad")], r"\('\.\.'\)"),
        ([(member("/OUTSIDE/escaped.txt"), b"bad")], "absolute name"),
        ([(member("CUB_200_2011/fifo", tarfile.FIFOTYPE), None)], "is a FIFO"),
        ([(member("CUB_200_2011/null", tarfile.CHRTYPE), None)], "is a character device"),
        ([(member("CUB_200_2011/sda", tarfile.BLKTYPE), None)], "is a block device"),
    ],
    ids=[
        "folder-link-out",
        "folder-link-dangling",
        "inner-link",
        "hard-link",
        "dotdot",
        "inner-dotdot",
        "absolute",
        "fifo",
        "chr-device",
        "blk-device",
    ],
)
def test_a_tar_member_that_is_no_plain_file_or_folder_inside_is_refused(members, match, place, tmp_path):
    data, outside = place
    (outside / "secret").write_text("secret\n")
    fixed = []
    for info, body in members:  # point the absolute names at this test's outside/ folder
        info = copying.copy(info)
        info.name = info.name.replace("/OUTSIDE", str(outside))
        fixed.append((info, body))
    with pytest.raises(UnsafeArchiveError, match=match) as err:
        _fetch_cub(tar_members(fixed), tmp_path, data)
    assert "CUB_200_2011.tgz" in str(err.value) and "\n" not in str(err.value)
    (outside / "secret").unlink()
    _assert_clean(data, outside, data / "cub")


def test_the_cve_2025_4517_chain_writes_nothing_outside(place, tmp_path):
    data, outside = place
    depth = len(Path(tmp_path / "data" / ".cub.fetch-x").parts)  # from inside the temporary folder
    archive = tar_members(cve_2025_4517("../" * depth + str(outside).lstrip("/")))
    with pytest.raises(UnsafeArchiveError, match="is a symbolic link"):
        _fetch_cub(archive, tmp_path, data)
    _assert_clean(data, outside, data / "cub")


# ------------------------------------------------------------------------------------------ zip members
def _fetch_inshop(images: bytes, tmp_path: Path, data: Path, partition: Path, **change):
    """In-Shop has no published checksum: no --no-verify is needed to reach the unpacking."""
    given = tmp_path / "img.zip"
    given.write_bytes(images)
    source = SOURCES.get("inshop")
    if change:
        (copy,) = source.copies
        archives = tuple(
            dataclasses.replace(a, **change) if a.filename == "img.zip" else a for a in copy.archives
        )
        source = dataclasses.replace(source, copies=(dataclasses.replace(copy, archives=archives),))
    return fetch_dataset(
        "inshop", data / "inshop", archives=[given, partition], source=source, progress=False
    )


@pytest.fixture
def partition(tmp_path: Path) -> Path:
    inshop = make_inshop(tmp_path / "src" / "In-shop")
    return inshop / "Eval" / "list_eval_partition.txt"


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        ([("../outside/escaped.txt", b"bad", None)], r"\('\.\.'\)"),
        ([("img/../../outside/escaped.txt", b"bad", None)], r"\('\.\.'\)"),
        ([("/OUTSIDE/escaped.txt", b"bad", None)], "absolute name"),
        ([("img", b"../outside", stat.S_IFLNK | 0o777)], "is a symbolic link"),
        ([("img/WOMEN/fifo", b"", stat.S_IFIFO | 0o644)], "file type"),
    ],
    ids=["dotdot", "inner-dotdot", "absolute", "symlink", "fifo"],
)
def test_a_zip_member_outside_or_not_a_file_is_refused(entries, match, place, tmp_path, partition):
    data, outside = place
    entries = [(n.replace("/OUTSIDE", str(outside)), b, m) for n, b, m in entries]
    with pytest.raises(UnsafeArchiveError, match=match):
        _fetch_inshop(zip_entries(entries, zipfile.ZIP_DEFLATED), tmp_path, data, partition)
    _assert_clean(data, outside, data / "inshop")


# ------------------------------------------------------------------------------------------ formats
def test_a_tar_named_img_zip_is_refused(place, tmp_path, partition):
    data, outside = place
    inshop = partition.parent.parent
    disguised = tar_gz({"img": inshop / "img"})
    with pytest.raises(
        ArchiveFormatError, match=r"is a gzip-compressed tar archive, but img\.zip is published as a zip"
    ):
        _fetch_inshop(disguised, tmp_path, data, partition)
    _assert_clean(data, outside, data / "inshop")


def test_a_zip_named_tgz_is_refused(place, tmp_path):
    data, outside = place
    cub = make_cub(tmp_path / "src" / "CUB_200_2011")
    with pytest.raises(ArchiveFormatError, match=r"is a zip archive, but CUB_200_2011\.tgz .* a tar archive"):
        _fetch_cub(zip_of({"CUB_200_2011": cub}), tmp_path, data)
    _assert_clean(data, outside, data / "cub")


def test_neither_tar_nor_zip_is_refused(place, tmp_path):
    data, outside = place
    with pytest.raises(ArchiveFormatError, match="neither a tar nor a zip"):
        _fetch_cub(b"<html>sign in</html>" * 40, tmp_path, data)
    _assert_clean(data, outside, data / "cub")


# ------------------------------------------------------------------------------------------ bombs
@pytest.mark.parametrize("kind", ["zip bytes", "tar bytes", "zip entries", "tar entries"])
def test_a_decompression_bomb_stops_at_the_bound(kind, place, tmp_path, partition):
    data, outside = place
    zeros = bytes(8 << 20)  # 8 MiB of zeros: a few KiB compressed
    if kind.startswith("zip"):
        entries = (
            [("img/zeros.bin", zeros, None)]
            if kind == "zip bytes"
            else [(f"img/{i}.jpg", b"x", None) for i in range(200)]
        )
        with pytest.raises(ArchiveTooLargeError, match=r"img\.zip .*decompression bomb") as err:
            _fetch_inshop(
                zip_entries(entries, zipfile.ZIP_DEFLATED),
                tmp_path,
                data,
                partition,
                max_bytes=1 << 20,
                max_entries=100,
            )
    else:
        members = (
            [(member("CUB_200_2011/zeros.bin"), zeros)]
            if kind == "tar bytes"
            else [(member(f"CUB_200_2011/{i}.jpg"), b"x") for i in range(200)]
        )
        with pytest.raises(ArchiveTooLargeError, match=r"CUB_200_2011\.tgz .*decompression bomb") as err:
            _fetch_cub(tar_members(members), tmp_path, data, max_bytes=1 << 20, max_entries=100)
    assert ("entries" in str(err.value)) == kind.endswith("entries")
    _assert_clean(data, outside, data / "inshop" if kind.startswith("zip") else data / "cub")


def test_every_unpacked_archive_is_bounded_above_its_canonical_size():
    from dmllab.data.base import DATASETS

    for name in SOURCES.names():
        images = sum(n for side, (n, _) in DATASETS.get(name).canonical_counts.items() if "+" not in side)
        if name == "inshop":
            images = 52712  # train + query + gallery (canonical_counts also lists query+gallery)
        for copy in SOURCES.get(name).copies:
            for archive in copy.archives:
                if not archive.place:
                    assert archive.max_entries is not None and archive.max_bytes is not None, archive.filename
                    assert 2 * images <= archive.max_entries <= 5 * images, archive.filename


# ------------------------------------------------------------------------------- ROOT: links, mode, lock
def test_root_that_is_a_link_is_refused(place, tmp_path):
    data, outside = place
    cub = make_cub(tmp_path / "src" / "CUB_200_2011")
    (data / "cub").symlink_to(outside)
    with pytest.raises(FetchError, match="is a symbolic link"):
        _fetch_cub(tar_gz({"CUB_200_2011": cub}), tmp_path, data)
    assert list(outside.iterdir()) == [] and (data / "cub").is_symlink()


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_root_mode_follows_the_umask(umask, place, tmp_path):
    data, _ = place
    cub = make_cub(tmp_path / "src" / "CUB_200_2011")
    old = os.umask(umask)
    try:
        _fetch_cub(tar_gz({"CUB_200_2011": cub}), tmp_path, data)
    finally:
        os.umask(old)
    root = data / "cub"
    assert stat.S_IMODE(root.stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((root / "images.txt").stat().st_mode) == 0o666 & ~umask
    assert not root.is_symlink() and sorted(p.name for p in data.iterdir()) == ["cub"]


def _child(code: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True, env=env
    )


def test_a_second_fetch_into_the_same_root_names_the_holder(place, tmp_path, capsys):
    data, _ = place
    lock = fetch_lock(data / "cub")
    holder = _child(
        f"""
        import time
        from dmllab.locks import exclusive
        with exclusive({str(lock)!r}):
            print("locked", flush=True)
            time.sleep(60)
        """
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        cub = make_cub(tmp_path / "src" / "CUB_200_2011")
        with pytest.raises(
            LockHeldError, match=f"being fetched into by another process \\(pid {holder.pid} on host"
        ):
            _fetch_cub(tar_gz({"CUB_200_2011": cub}), tmp_path, data)
        given = tmp_path / "CUB_200_2011.tgz"
        argv = ["data", "fetch", "cub", str(data / "cub"), "--from", str(given), "--no-verify", "--quiet"]
        assert run_cli(argv) == 1
        err = capsys.readouterr().err.strip()
        assert f"pid {holder.pid} on host {socket.gethostname()}" in err and "\n" not in err
        assert sorted(p.name for p in data.iterdir()) == [] and lock.exists()  # the holder's lock, untouched
    finally:
        holder.kill()
        holder.wait()


def test_a_fetch_killed_while_unpacking_is_cleaned_up_by_the_next(place, tmp_path, capsys):
    data, outside = place
    cub = make_cub(tmp_path / "src" / "CUB_200_2011")
    given = tmp_path / "CUB_200_2011.tgz"
    given.write_bytes(tar_gz({"CUB_200_2011": cub}))
    child = _child(
        f"""
        import time
        from dmllab.data import unpack
        write = unpack._Writer.file
        def slow(self, name, source):
            write(self, name, source)
            print("unpacking", flush=True)
            time.sleep(60)
        unpack._Writer.file = slow
        from dmllab.data.fetch import fetch_dataset
        fetch_dataset("cub", {str(data / "cub")!r}, archives=[{str(given)!r}], verify_checksums=False,
                      progress=False)
        """
    )
    assert child.stdout.readline().strip() == "unpacking"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    left = [p.name for p in data.iterdir() if ".fetch-" in p.name]
    assert len(left) == 1 and left[0].startswith(f".cub.fetch-{child.pid}-")
    argv = ["data", "fetch", "cub", str(data / "cub"), "--from", str(given), "--no-verify", "--no-counts"]
    assert run_cli([*argv, "--quiet"]) == 0
    assert f"removed {data / left[0]}" in capsys.readouterr().out
    assert sorted(p.name for p in data.iterdir()) == ["cub"] and list(outside.iterdir()) == []


def test_a_failed_unpack_leaves_no_temporary_folder_and_a_rerun_works(place, tmp_path):
    data, outside = place
    cub = make_cub(tmp_path / "src" / "CUB_200_2011")
    good = tar_gz({"CUB_200_2011": cub})
    bad = good[: len(good) // 2]  # cut: the gzip stream ends early
    with pytest.raises(FetchError, match="cannot unpack"):
        _fetch_cub(bad, tmp_path, data)
    _assert_clean(data, outside, data / "cub")
    t0 = time.perf_counter()
    result = _fetch_cub(good, tmp_path, data)
    assert result.root == data / "cub" and time.perf_counter() - t0 < 60
