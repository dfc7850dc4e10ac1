"""``dmllab data fetch`` against a local HTTP server that serves miniature archives in the real layouts.

The server (127.0.0.1, ephemeral port) can cut a transfer half-way, ignore Range requests or answer with an
HTML page; every request's Range header is recorded. No test reaches the network: the real URLs are replaced
through :data:`dmllab.data.fetch.SOURCES`, whose entries are ``dataclasses.replace``d.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from data_layouts import CARS_CLASSES, make_cars, make_cub, make_inshop, make_sop, write_jpeg

from dmllab.data import CUB200, SOP, Cars196, InShop
from dmllab.data import download as download_mod
from dmllab.data import fetch as fetch_mod
from dmllab.data.cli import add_commands
from dmllab.data.fetch import SOURCES, DatasetSource, FetchError, fetch_dataset
from dmllab.data.sources import DownloadError
from dmllab.registry import Registry


# ------------------------------------------------------------------------------------------ the server
class ArchiveServer:
    """Serves ``files`` (URL path -> bytes) with Range support; ``cut`` holds paths whose next response
    stops half-way; ``ignore_range`` answers every request with the whole file; ``html`` paths answer with a
    web page."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut: set[str] = set()
        self.html: set[str] = set()
        self.ignore_range = False
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep the test output clean
                pass

            def do_GET(self) -> None:
                server.requests.append((self.path, self.headers.get("Range")))
                if self.path in server.html:
                    body = b"<html><body>Sign in to continue</body></html>"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                ranged = self.headers.get("Range")
                if ranged and not server.ignore_range:
                    start = int(ranged.removeprefix("bytes=").split("-")[0])
                    if start >= len(data):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.path in server.cut:
                    server.cut.discard(self.path)
                    self.wfile.write(body[: len(body) // 2])  # then the connection closes (HTTP/1.0)
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{path}"

    def ranges(self, path: str) -> list[str | None]:
        return [r for p, r in self.requests if p == f"/{path}"]


@pytest.fixture
def server() -> Iterator[ArchiveServer]:
    srv = ArchiveServer()
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


# ------------------------------------------------------------------------- miniature archives, real layouts
def tar_gz(entries: dict[str, Path]) -> bytes:
    """A .tgz holding each folder or file under its archive name."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for arcname, path in entries.items():
            tar.add(path, arcname=arcname)
    return buffer.getvalue()


def zip_of(entries: dict[str, Path]) -> bytes:
    """A .zip holding each folder (recursively) or file under its archive name."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for arcname, path in entries.items():
            if path.is_file():
                zf.write(path, arcname)
                continue
            for item in sorted(path.rglob("*")):
                zf.write(item, f"{arcname}/{item.relative_to(path).as_posix()}")
    return buffer.getvalue()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture
def archives(tmp_path: Path) -> dict[str, bytes]:
    """The published files of every dataset, built from the miniature layouts (file name -> bytes)."""
    src = tmp_path / "src"
    cub = make_cub(src / "CUB_200_2011")
    (src / "attributes.txt").write_text(
        "1 has_bill_shape::curved\n"
    )  # CUB_200_2011.tgz holds it beside the folder
    sop = make_sop(src / "Stanford_Online_Products")
    cars = make_cars(src / "cars")
    inshop = make_inshop(src / "In-shop")
    return {
        "CUB_200_2011.tgz": tar_gz({"CUB_200_2011": cub, "attributes.txt": src / "attributes.txt"}),
        "Stanford_Online_Products.zip": zip_of({"Stanford_Online_Products": sop}),
        "car_ims.tgz": tar_gz({"car_ims": cars / "car_ims"}),
        "cars_annos.mat": (cars / "cars_annos.mat").read_bytes(),
        "img.zip": zip_of({"img": inshop / "img"}),
        "list_eval_partition.txt": (inshop / "Eval" / "list_eval_partition.txt").read_bytes(),
        "stanford-car-dataset-by-classes-folder.zip": kaggle_cars_zip(src / "kaggle"),
    }


def kaggle_cars_zip(folder: Path) -> bytes:
    """PML's Kaggle copy of Cars196 (pytorch_metric_learning/datasets/cars196.py): names.csv,
    anno_train.csv and anno_test.csv (``fname,x1,y1,x2,y2,class``), images in
    ``car_data/car_data/<split>/<class name>/``."""
    names = [f"Car model {c}" for c in range(1, 197)]
    names[98] = "Ram C/V Cargo Van Minivan 2012"  # class 99: a '/' becomes '-' in the folder name
    rows: dict[str, list[str]] = {"train": [], "test": []}
    image = 0
    for c, n in CARS_CLASSES.items():
        for k in range(n):
            image += 1
            split = "train" if k % 2 == 0 else "test"  # the classification split mixes every class
            fname = f"{len(rows[split]) + 1:05d}.jpg"
            write_jpeg(
                folder / "car_data" / "car_data" / split / names[c - 1].replace("/", "-") / fname, seed=image
            )
            rows[split].append(f"{fname},1,2,7,6,{c}")
    (folder / "names.csv").write_text("\n".join(names) + "\n")
    for split, lines in rows.items():
        (folder / f"anno_{split}.csv").write_text("\n".join(lines) + "\n")
    return zip_of({p.name: p for p in sorted(folder.iterdir())})


def served(
    source: DatasetSource, server: ArchiveServer, files: dict[str, bytes], **md5_override: str
) -> DatasetSource:
    """``source`` with every archive served by ``server`` and its md5 that of the miniature archive; an
    archive published without a checksum stays without one."""
    copies = []
    for copy in source.copies:
        new = []
        for archive in copy.archives:
            server.files[f"/{archive.filename}"] = files[archive.filename]
            checksum = md5_override.get(archive.filename, md5(files[archive.filename]))
            new.append(
                dataclasses.replace(
                    archive,
                    url=server.url(archive.filename),
                    md5=checksum if archive.md5 else None,
                    sha256=None,
                )
            )
        copies.append(dataclasses.replace(copy, archives=tuple(new)))
    return dataclasses.replace(source, copies=tuple(copies))


@pytest.fixture
def use_sources(monkeypatch):
    """Replace the CLI's sources by the given ones (the others stay the real entries)."""

    def install(*sources: DatasetSource) -> None:
        registry: Registry[DatasetSource] = Registry("dataset to fetch")
        replaced = {s.name: s for s in sources}
        for name in SOURCES.names():
            registry.register(name, replaced.get(name, SOURCES.get(name)))
        monkeypatch.setattr(fetch_mod, "SOURCES", registry)

    return install


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dmllab")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def leftovers(folder: Path) -> list[str]:
    """Temporary folders and partial downloads left in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if ".fetch-" in p.name or p.name.endswith(".part"))


# ----------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize(
    ("name", "cls", "layout"),
    [("cub", CUB200, "CUB_200_2011"), ("sop", SOP, "Stanford_Online_Products")],
)
def test_fetch_downloads_and_ends_in_a_layout_data_check_accepts(
    name, cls, layout, server, archives, use_sources, tmp_path, capsys
) -> None:
    use_sources(served(SOURCES.get(name), server, archives))
    root = tmp_path / "data" / name
    assert run_cli(["data", "fetch", name, str(root), "--no-counts", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "matches the published checksum" in out and "OK" in out and f"use root={root}" in out
    source_copy = tmp_path / "src" / layout
    for split in cls.splits:
        a, b = cls(source_copy, split, check_counts=False), cls(root, split, check_counts=False)
        assert a.files == b.files and a.labels == b.labels
    assert not (
        root / "attributes.txt"
    ).exists()  # CUB's top-level extra file stays out of the dataset folder
    assert leftovers(tmp_path / "data") == [] and sorted(p.name for p in (tmp_path / "data").iterdir()) == [
        name
    ]
    manifest = fetch_mod.json.loads((root / fetch_mod.MANIFEST).read_text())
    (record,) = manifest["files"]
    assert record["verified"] and record["md5"] == md5(next(iter(server.files.values())))
    assert record["url"] == server.url(record["filename"]) and record["from"] is None
    # a re-run finds the finished fetch: no request, the check runs again
    before = len(server.requests)
    assert run_cli(["data", "fetch", name, str(root), "--no-counts", "--quiet"]) == 0
    assert len(server.requests) == before and "finished fetch" in capsys.readouterr().out


def test_interrupted_download_resumes_with_a_range_request(
    server, archives, use_sources, tmp_path, capsys
) -> None:
    source = served(SOURCES.get("cub"), server, archives)
    server.cut.add("/CUB_200_2011.tgz")
    root = tmp_path / "data" / "CUB_200_2011"
    with pytest.raises(DownloadError, match="re-run the same command to resume") as err:
        fetch_dataset("cub", root, source=source, retries=0, progress=False)
    assert server.url("CUB_200_2011.tgz") in str(err.value) and "\n" not in str(err.value)
    part = tmp_path / "data" / "CUB_200_2011.tgz.part"
    size = len(archives["CUB_200_2011.tgz"])
    assert part.stat().st_size == size // 2
    assert not root.exists() and [p.name for p in (tmp_path / "data").iterdir()] == [part.name]

    use_sources(source)
    assert run_cli(["data", "fetch", "cub", str(root), "--no-counts", "--quiet"]) == 0
    assert server.ranges("CUB_200_2011.tgz") == [None, f"bytes={size // 2}-"]
    assert "OK" in capsys.readouterr().out
    assert leftovers(tmp_path / "data") == [] and not (tmp_path / "data" / "CUB_200_2011.tgz").exists()


def test_interruption_is_resumed_within_one_call_and_a_server_ignoring_range_restarts(
    server, archives, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(download_mod, "RETRY_WAIT_S", 0.0)
    source = served(SOURCES.get("sop"), server, archives)
    server.cut.add("/Stanford_Online_Products.zip")
    root = tmp_path / "sop"
    fetch_dataset("sop", root, source=source, retries=1, progress=False)
    size = len(archives["Stanford_Online_Products.zip"])
    assert server.ranges("Stanford_Online_Products.zip") == [None, f"bytes={size // 2}-"]
    assert SOP(root, "test", check_counts=False).files

    server.ignore_range, server.requests = True, []
    server.cut.add("/Stanford_Online_Products.zip")
    root2 = tmp_path / "sop2"
    fetch_dataset(
        "sop", root2, source=source, retries=1, progress=False
    )  # the 200 answer starts the file again
    assert server.ranges("Stanford_Online_Products.zip") == [None, f"bytes={size // 2}-"]
    assert SOP(root2, "test", check_counts=False).files == SOP(root, "test", check_counts=False).files


def test_wrong_checksum_fails_in_one_line_and_leaves_nothing(
    server, archives, use_sources, tmp_path, capsys
) -> None:
    use_sources(served(SOURCES.get("cub"), server, archives, **{"CUB_200_2011.tgz": "0" * 32}))
    root = tmp_path / "data" / "CUB_200_2011"
    assert run_cli(["data", "fetch", "cub", str(root), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("dmllab: error: ") and "\n" not in err
    assert "md5" in err and "0" * 32 in err and server.url("CUB_200_2011.tgz") in err and "re-run" in err
    assert (
        md5(archives["CUB_200_2011.tgz"]) in err and "powerful-benchmarker" in err
    )  # what was found, and the source
    assert not (tmp_path / "data").exists()  # no dataset folder, no temporary folder, no download, no lock


def test_wrong_checksum_of_a_from_file_keeps_the_file(archives, tmp_path, capsys) -> None:
    given = tmp_path / "CUB_200_2011.tgz"
    given.write_bytes(archives["CUB_200_2011.tgz"][:-10] + b"0" * 10)  # the real md5 cannot match this
    root = tmp_path / "data" / "cub"
    assert run_cli(["data", "fetch", "cub", str(root), "--from", str(given), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert str(given) in err and "97eceeb196236b17998738112f37df78" in err and "\n" not in err.strip()
    assert given.is_file() and not (tmp_path / "data").exists()


def test_no_verify_unpacks_and_records_the_mismatch(archives, tmp_path, capsys) -> None:
    given = tmp_path / "CUB_200_2011.tgz"
    given.write_bytes(
        archives["CUB_200_2011.tgz"]
    )  # not the real archive: its md5 differs from the published one
    root = tmp_path / "cub"
    assert (
        run_cli(
            ["data", "fetch", "cub", str(root), "--from", str(given), "--no-verify", "--no-counts", "--quiet"]
        )
        == 0
    )
    assert "not checked (--no-verify)" in capsys.readouterr().out
    (record,) = fetch_mod.json.loads((root / fetch_mod.MANIFEST).read_text())["files"]
    assert not record["verified"] and record["published"]["digest"] == "97eceeb196236b17998738112f37df78"


@pytest.mark.parametrize(
    ("name", "cls", "files", "layout"),
    [
        ("cub", CUB200, ["CUB_200_2011.tgz"], "CUB_200_2011"),
        ("cars", Cars196, ["car_ims.tgz", "cars_annos.mat"], "cars"),
        ("inshop", InShop, ["img.zip", "list_eval_partition.txt"], "In-shop"),
    ],
)
def test_from_local_archives_needs_no_network(
    name, cls, files, layout, server, archives, use_sources, tmp_path, capsys
) -> None:
    use_sources(served(SOURCES.get(name), server, archives))  # served, so that a request would be seen
    offline = tmp_path / "offline"
    offline.mkdir()
    argv = ["data", "fetch", name, str(tmp_path / "data" / name), "--no-counts", "--quiet"]
    for filename in files:
        (offline / filename).write_bytes(archives[filename])
        argv += ["--from", str(offline / filename)]
    assert run_cli(argv) == 0
    assert server.requests == []
    out = capsys.readouterr().out
    assert "OK" in out
    for split in cls.splits:
        a = cls(tmp_path / "src" / layout, split, check_counts=False)
        b = cls(tmp_path / "data" / name, split, check_counts=False)
        assert a.files == b.files and a.labels == b.labels and a.class_ids == b.class_ids
    assert sorted(p.name for p in offline.iterdir()) == sorted(files)  # --from files are never removed
    manifest = fetch_mod.json.loads((tmp_path / "data" / name / fetch_mod.MANIFEST).read_text())
    assert [r["from"] for r in manifest["files"]] == [str(offline / f) for f in files]
    if name == "inshop":
        assert "no published checksum" in out
        assert all(r["published"] is None and len(r["sha256"]) == 64 for r in manifest["files"])


def test_cars_without_from_names_the_files_and_checksums(tmp_path, capsys) -> None:
    root = tmp_path / "cars"
    assert (
        run_cli(["data", "fetch", "cars", str(root), "--quiet"]) == 1
    )  # the real sources: nothing is requested
    err = capsys.readouterr().err.strip()
    assert err.startswith("dmllab: error: cars: ") and "\n" not in err
    for text in (
        "--from",
        "car_ims.tgz (md5 d5c8f0aa497503f355e17dc7886c3f14)",
        "cars_annos.mat (md5 b407c6086d669747186bd1d764ff9dbc)",
        "stanford-car-dataset-by-classes-folder.zip (no published checksum)",
        "pytorch/vision#7545",
    ):
        assert text in err
    assert not root.exists() and list(tmp_path.iterdir()) == []


def test_cars_from_half_the_files_names_the_other(archives, tmp_path, capsys) -> None:
    (tmp_path / "car_ims.tgz").write_bytes(archives["car_ims.tgz"])
    assert (
        run_cli(["data", "fetch", "cars", str(tmp_path / "cars"), "--from", str(tmp_path / "car_ims.tgz")])
        == 1
    )
    err = capsys.readouterr().err
    assert "also needs cars_annos.mat (md5 b407c6086d669747186bd1d764ff9dbc)" in err


def test_cars_from_the_kaggle_copy_is_converted(archives, tmp_path, capsys) -> None:
    given = tmp_path / "archive.zip"  # the name a browser download gets: a single file is matched by count
    given.write_bytes(archives["stanford-car-dataset-by-classes-folder.zip"])
    root = tmp_path / "cars"
    assert run_cli(["data", "fetch", "cars", str(root), "--from", str(given), "--no-counts", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "kaggle copy" in out and "no published checksum" in out and "OK" in out
    original = tmp_path / "src" / "cars"
    for split in Cars196.splits:
        a, b = Cars196(original, split, check_counts=False), Cars196(root, split, check_counts=False)
        assert a.class_ids == b.class_ids and sorted(a.labels) == sorted(b.labels)
    assert Cars196(root, "test", check_counts=False).class_names[0] == "Ram C/V Cargo Van Minivan 2012"
    assert fetch_mod.json.loads((root / fetch_mod.MANIFEST).read_text())["copy"] == "kaggle"


def test_bad_inputs_fail_in_one_line(archives, server, tmp_path, capsys) -> None:
    wrong = tmp_path / "photos.zip"
    wrong.write_bytes(archives["img.zip"])
    cases = [
        (["cub", str(tmp_path / "a"), "--from", str(tmp_path / "missing.tgz")], "no such file"),
        (["inshop", str(tmp_path / "b"), "--from", str(wrong)], "which is not img.zip"),
        (["imagenet", str(tmp_path / "c")], "valid dataset to fetch names"),
    ]
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine\n")
    cases.append((["sop", str(occupied)], "already exists and is not empty"))
    for argv, expected in cases:
        assert run_cli(["data", "fetch", *argv, "--quiet"]) == 1
        err = capsys.readouterr().err.strip()
        assert expected in err and "\n" not in err, err
    assert (occupied / "notes.txt").read_text() == "mine\n"


def test_html_page_and_http_error_are_named(server, archives, tmp_path) -> None:
    source = served(SOURCES.get("sop"), server, archives)
    server.html.add("/Stanford_Online_Products.zip")
    with pytest.raises(DownloadError, match="HTML page instead of the file.*--from"):
        fetch_dataset("sop", tmp_path / "sop", source=source, retries=0, progress=False)
    server.html.clear()
    del server.files["/Stanford_Online_Products.zip"]
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch_dataset("sop", tmp_path / "sop", source=source, retries=0, progress=False)
    assert leftovers(tmp_path) == [] and not (tmp_path / "sop").exists()


def test_an_archive_without_the_layout_leaves_no_folder(tmp_path) -> None:
    folder = tmp_path / "other"
    (folder / "CUB_200_2011").mkdir(parents=True)
    (folder / "CUB_200_2011" / "README").write_text("not the dataset\n")
    given = tmp_path / "CUB_200_2011.tgz"
    given.write_bytes(tar_gz({"CUB_200_2011": folder / "CUB_200_2011"}))
    with pytest.raises(FetchError, match="images.txt.*is missing"):
        fetch_dataset("cub", tmp_path / "cub", archives=[given], verify_checksums=False, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CUB_200_2011.tgz", "other"]


def test_every_real_archive_cites_its_source() -> None:
    for name in SOURCES.names():
        source = SOURCES.get(name)
        assert source.name == name and source.copies
        for copy in source.copies:
            for archive in copy.archives:
                assert archive.source, archive.filename
                if archive.md5:
                    assert len(archive.md5) == 32 and int(archive.md5, 16) >= 0
                else:
                    assert "no checksum is published" in archive.source
            if any(a.url is None for a in copy.archives):
                assert copy.where, (name, copy.label)
    assert all(a.url and a.md5 for n in ("cub", "sop") for a in SOURCES.get(n).official.archives)
    assert all(a.url is None for n in ("cars", "inshop") for c in SOURCES.get(n).copies for a in c.archives)


def test_no_answer_leaves_no_partial_file(archives, tmp_path) -> None:
    import socket

    with socket.socket() as sock:  # a port that nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    source = SOURCES.get("cub")
    (copy,) = source.copies
    (archive,) = copy.archives
    dead = dataclasses.replace(
        source,
        copies=(
            dataclasses.replace(
                copy, archives=(dataclasses.replace(archive, url=f"http://127.0.0.1:{port}/x"),)
            ),
        ),
    )
    with pytest.raises(DownloadError, match=f"cannot download http://127.0.0.1:{port}/x .*--from"):
        fetch_dataset("cub", tmp_path / "data" / "cub", source=dead, retries=0, progress=False)
    assert not (tmp_path / "data").exists()


def test_kept_archives_are_reused_without_a_request(server, archives, use_sources, tmp_path, capsys) -> None:
    use_sources(served(SOURCES.get("cub"), server, archives))
    downloads = tmp_path / "downloads"
    for folder in ("one", "two"):
        argv = ["data", "fetch", "cub", str(tmp_path / folder), "--downloads", str(downloads)]
        assert run_cli([*argv, "--keep-archives", "--no-counts", "--quiet"]) == 0
    assert len(server.requests) == 1 and "using the earlier download" in capsys.readouterr().out
    assert sorted(p.name for p in downloads.iterdir()) == ["CUB_200_2011.tgz"]
    assert (
        CUB200(tmp_path / "one", "test", check_counts=False).files
        == CUB200(tmp_path / "two", "test", check_counts=False).files
    )
