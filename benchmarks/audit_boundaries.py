"""The audit's cases at dmllab's trust boundaries (benchmarks/audit.py runs them with its other classes).

Classes: ``security`` (hostile dataset archives and ROOTs through ``dmllab data fetch``: a file written outside ROOT
is a ``breach``), ``index files`` (image paths, duplicates and boxes of the real benchmarks' index files, through
the loaders, ``data check`` and ``data cache``), ``downloads`` (trickling, stalled and slow servers, full disks,
file-size limits, concurrent and killed fetches) and ``bounds`` (worker counts, the notebooks' parameter ranges).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from audit_kit import (
    BREACH,
    NAMED,
    REPO,
    TRACE,
    WRONG,
    Case,
    _enospc,
    _layouts,
    _tiny_fs,
    _unmount,
    cli,
    expect_error,
    expect_value,
)

# ------------------------------------------------------------------------------------------- archives
sys.path.insert(0, str(REPO / "tests" / "data"))  # the builders the fetch tests use
from hostile_archives import cve_2025_4517, member, tar_members, zip_entries  # noqa: E402


def _up_to(folder: Path, target: Path) -> str:
    """A relative path from inside a temporary folder in ``folder`` to ``target``."""
    return "../" * len((folder / "staging").parts) + str(target).lstrip("/")


def _inshop_partition(where: Path) -> Path:
    root = _layouts().make_inshop(where / "src" / "In-shop")
    return root / "Eval" / "list_eval_partition.txt"


def _fetch_case(name: str, build: Callable[[Path, Path, Path], tuple[str, list[Path]]], *needles: str):
    """``build(case folder, data folder, outside folder) -> (dataset, --from files)``; the fetch must fail in one
    line naming every needle, write nothing outside ROOT and leave nothing in the data folder."""

    def run(ctx):
        d = ctx.folder()
        data, outside = d / "data", d / "outside"
        data.mkdir()
        outside.mkdir()
        dataset, files = build(d, data, outside)
        argv = ["data", "fetch", dataset, str(data / dataset), "--no-counts", "--quiet"]
        for f in files:
            argv += ["--from", str(f)]
        if dataset != "inshop":
            argv.append("--no-verify")  # the published checksum would refuse a hand-made archive first
        outcome, detail = cli(argv, *needles)
        escaped = [p for p in outside.rglob("*")]
        if escaped:
            return BREACH, f"{escaped[0]} written outside ROOT; {detail}"
        left = sorted(p.name for p in data.iterdir())
        if left:
            return WRONG, f"left {left} in the data folder; {detail}"
        return outcome, detail

    return Case("security", name, run)


def _cub_tgz(members_of: Callable[[Path, Path], list]) -> Callable:
    def build(d: Path, data: Path, outside: Path):
        (outside.parent / "secret").write_text("secret\n")
        path = d / "CUB_200_2011.tgz"
        path.write_bytes(tar_members(members_of(data, outside)))
        return "cub", [path]

    return build


def _inshop_zip(payload_of: Callable[[Path, Path, Path], bytes]) -> Callable:
    def build(d: Path, data: Path, outside: Path):
        path = d / "img.zip"
        path.write_bytes(payload_of(d, data, outside))
        return "inshop", [path, _inshop_partition(d)]

    return build


def security_cases() -> list[Case]:
    cases = [
        _fetch_case(
            "img.zip that is a tar with the CVE-2025-4517 chain (no checksum published)",
            _inshop_zip(lambda d, data, out: tar_members(cve_2025_4517(_up_to(data, out)))),
            "img.zip",
            "tar",
        ),
        _fetch_case(
            "CUB tgz with the CVE-2025-4517 chain (--no-verify)",
            _cub_tgz(lambda data, out: cve_2025_4517(_up_to(data, out))),
            "symbolic link",
        ),
        _fetch_case(
            "CUB_200_2011 entry a link to ROOT's parent (--no-verify)",
            _cub_tgz(lambda data, out: [(member("CUB_200_2011", tarfile.SYMTYPE, ".."), None)]),
            "symbolic link",
        ),
        _fetch_case(
            "CUB_200_2011 entry a dangling link (--no-verify)",
            _cub_tgz(lambda data, out: [(member("CUB_200_2011", tarfile.SYMTYPE, "/nonexistent/x"), None)]),
            "symbolic link",
        ),
        _fetch_case(
            "a link inside the dataset folder to outside ROOT (--no-verify)",
            _cub_tgz(
                lambda data, out: [
                    (member("CUB_200_2011", tarfile.DIRTYPE), None),
                    (member("CUB_200_2011/images", tarfile.SYMTYPE, str(out)), None),
                    (member("CUB_200_2011/images/x.jpg"), b"x"),
                ]
            ),
            "symbolic link",
        ),
        _fetch_case(
            "a hard link to a file outside (--no-verify)",
            _cub_tgz(lambda data, out: [(member("CUB_200_2011/x", tarfile.LNKTYPE, "../../secret"), None)]),
            "hard link",
        ),
        _fetch_case(
            "a tar member ../outside/x (--no-verify)",
            _cub_tgz(lambda data, out: [(member(f"../{out.name}/x.txt"), b"bad")]),
            "'..'",
        ),
        _fetch_case(
            "a tar member with an absolute name (--no-verify)",
            _cub_tgz(lambda data, out: [(member(str(out / "x.txt")), b"bad")]),
            "absolute",
        ),
        _fetch_case(
            "a tar FIFO member (--no-verify)",
            _cub_tgz(lambda data, out: [(member("CUB_200_2011/fifo", tarfile.FIFOTYPE), None)]),
            "FIFO",
        ),
        _fetch_case(
            "a tar character device member (--no-verify)",
            _cub_tgz(lambda data, out: [(member("CUB_200_2011/null", tarfile.CHRTYPE), None)]),
            "character device",
        ),
        _fetch_case(
            "a tar member declaring 5 GiB, over CUB's bound (--no-verify)",
            _cub_tgz(lambda data, out: [(member("CUB_200_2011/big.bin", size=5 << 30), None)]),
            "decompression bomb",
        ),
        _fetch_case(
            "img.zip with a ../ member",
            _inshop_zip(lambda d, data, out: zip_entries([(f"../{out.name}/x.txt", b"bad", None)])),
            "'..'",
        ),
        _fetch_case(
            "img.zip with an absolute member",
            _inshop_zip(lambda d, data, out: zip_entries([(str(out / "x.txt"), b"bad", None)])),
            "absolute",
        ),
        _fetch_case(
            "img.zip with a symlink entry",
            _inshop_zip(lambda d, data, out: zip_entries([("img", str(out).encode(), stat.S_IFLNK | 0o777)])),
            "symbolic link",
        ),
        _fetch_case(
            "img.zip with more entries than In-Shop's bound",
            _inshop_zip(lambda d, data, out: zip_entries([(f"img/{i}", b"", None) for i in range(200_001)])),
            "entries",
            "decompression bomb",
        ),
    ]

    def disguised(ctx):
        d = ctx.folder()
        data = d / "data"
        partition = _inshop_partition(d)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(partition.parent.parent / "img", arcname="img")
        (d / "img.zip").write_bytes(buffer.getvalue())
        argv = ["data", "fetch", "inshop", str(data / "inshop"), "--from", str(d / "img.zip")]
        outcome, detail = cli([*argv, "--from", str(partition), "--no-counts", "--quiet"], "img.zip", "tar")
        return (WRONG, f"ROOT made; {detail}") if (data / "inshop").exists() else (outcome, detail)

    def root_link(ctx):
        d = ctx.folder()
        cub = _layouts().make_cub(d / "src" / "CUB_200_2011")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(cub, arcname="CUB_200_2011")
        (d / "CUB_200_2011.tgz").write_bytes(buffer.getvalue())
        (d / "data").mkdir()
        (d / "outside").mkdir()
        (d / "data" / "cub").symlink_to(d / "outside")
        argv = ["data", "fetch", "cub", str(d / "data" / "cub"), "--from", str(d / "CUB_200_2011.tgz")]
        outcome, detail = cli([*argv, "--no-verify", "--quiet"], "symbolic link")
        if list((d / "outside").iterdir()):
            return BREACH, f"unpacked through the ROOT link; {detail}"
        return outcome, detail

    cases += [
        Case("security", "a tar (valid layout) named img.zip", disguised),
        Case("security", "ROOT is a symbolic link", root_link),
    ]
    return cases


# ------------------------------------------------------------------------------------------- index files
def _edit(path: Path, number: int, change: Callable[[str], str]) -> None:
    lines = path.read_text().splitlines()
    lines[number - 1] = change(lines[number - 1])
    path.write_text("\n".join(lines) + "\n")


def index_cases() -> list[Case]:
    def inshop_path(kind: str):
        def run(ctx):
            d = ctx.folder()
            root = _layouts().make_inshop(d / "data" / "In-shop")
            _layouts().write_jpeg(d / "outside" / "x.jpg", seed=1)
            bad = {"dotdot": "../../outside/x.jpg", "absolute": str(d / "outside" / "x.jpg")}[kind]
            part = root / "Eval" / "list_eval_partition.txt"
            _edit(part, 5, lambda line: line.replace(line.split()[0], bad, 1))
            return cli(
                ["data", "check", "inshop", str(root), "--no-counts", "--quiet"], "line 5", expect_rc=1
            )

        return Case("index files", f"In-Shop partition path {kind}: data check", run)

    def inshop_cache(kind: str):
        def run(ctx):
            d = ctx.folder()
            root = _layouts().make_inshop(d / "data" / "In-shop")
            bad = {"dotdot": "../../escaped.jpg", "absolute": str(d / "escaped.jpg")}[kind]
            part = root / "Eval" / "list_eval_partition.txt"
            _edit(part, 5, lambda line: line.replace(line.split()[0], bad, 1))
            _layouts().write_jpeg(d / "escaped.jpg", seed=1)
            out = d / "cache" / "out"
            outcome, detail = cli(
                ["data", "cache", "inshop", str(root), "--out", str(out), "--quiet"], "line 5"
            )
            written = [p for p in d.rglob("escaped.jpg") if p != d / "escaped.jpg"]
            if written or (d / "cache").exists():
                return BREACH, f"data cache wrote {written or [d / 'cache']}; {detail}"
            return outcome, detail

        return Case("index files", f"data cache --out with an In-Shop path {kind}", run)

    def alias_duplicate(ctx):
        root = _layouts().make_inshop(ctx.folder() / "In-shop")
        part = root / "Eval" / "list_eval_partition.txt"
        lines = part.read_text().splitlines()
        number = next(n for n, line in enumerate(lines, start=1) if line.endswith("gallery"))
        query = next(line for line in lines if line.endswith("query")).split()
        alias = query[0].replace("/Dresses/", "/./Dresses/")
        _edit(part, number, lambda line: f"{alias}  {query[1]}  gallery")
        return cli(
            ["data", "check", "inshop", str(root), "--no-counts", "--quiet"], f"line {number}", expect_rc=1
        )

    def cub_box(box: str):
        def run(ctx):
            root = _layouts().make_cub(ctx.folder() / "CUB_200_2011")
            _edit(root / "bounding_boxes.txt", 3, lambda line: f"{line.split()[0]} {box}")
            return cli(
                ["data", "check", "cub", str(root), "--no-counts", "--quiet"],
                "bounding_boxes.txt, line 3",
                expect_rc=1,
            )

        return Case("index files", f"CUB box {box!r}", run)

    def cub_space(ctx):
        from dmllab.data import CUB200

        root = _layouts().make_cub(ctx.folder() / "CUB_200_2011")
        lines = (root / "images.txt").read_text().splitlines()
        image_id, rel = lines[1].split(" ", 1)
        spaced = rel.replace(".jpg", " copy.jpg")
        (root / "images" / rel).rename(root / "images" / spaced)
        _edit(root / "images.txt", 2, lambda line: f"{image_id} {spaced}")

        def files():
            return [f for s in ("trainval", "test") for f in CUB200(root, s, check_counts=False).files]

        return expect_value(files, lambda v, w: f"images/{spaced}" in v or "the name was cut")

    def api_path(dataset: str, bad: str):
        def run(ctx):
            import numpy as np

            from dmllab.data import SOP, Cars196

            lay = _layouts()
            if dataset == "sop":
                root = lay.make_sop(ctx.folder() / "Stanford_Online_Products")
                _edit(root / "Ebay_test.txt", 3, lambda line: " ".join([*line.split()[:3], bad]))
                return expect_error(lambda: SOP(root, "test", check_counts=False), "Ebay_test.txt, line 3")
            import scipy.io

            root = lay.make_cars(ctx.folder() / "cars")
            mat = scipy.io.loadmat(root / "cars_annos.mat")
            ann = mat["annotations"]
            ann[0, 2]["relative_im_path"] = np.array([bad])
            scipy.io.savemat(root / "cars_annos.mat", {"annotations": ann, "class_names": mat["class_names"]})
            return expect_error(lambda: Cars196(root, "train", check_counts=False), "annotation 3")

        return Case("index files", f"{dataset} image path {bad!r}", run)

    cases = [inshop_path(k) for k in ("dotdot", "absolute")]
    cases += [inshop_cache(k) for k in ("dotdot", "absolute")]
    cases.append(Case("index files", "query listed again as gallery under img/./x.jpg", alias_duplicate))
    cases += [cub_box(b) for b in ("1 2 -5 3", "1 2 5 0", "1 2 nan 3", "1 inf 5 3", "1 2 -5 -3")]
    cases.append(Case("index files", "a CUB file name with a space", cub_space))
    cases += [api_path(ds, b) for ds in ("sop", "cars") for b in ("../x.jpg", "/x.jpg", "a/./x.jpg")]
    return cases


# ---------------------------------------------------------------------------------------------- downloads
@contextlib.contextmanager
def _server(mode: str, gap: float = 0.5, body: bytes = bytes(65536)):
    """A local server: ``trickle`` (a byte every ``gap`` s), ``stall`` (headers, then nothing), ``fast``."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                if mode == "trickle":
                    for byte in body:
                        if stop.wait(gap):
                            return
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                elif mode == "stall":
                    stop.wait(60)
                else:
                    self.wfile.write(body)
            except OSError:
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/file.bin"
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()


def _timed_download(mode: str, limits: dict, within: float, *needles: str, gap: float = 0.5):
    def run(ctx):
        from dmllab.data.download import DownloadLimits, download

        d = ctx.folder()
        with _server(mode, gap=gap) as url:
            t0 = time.monotonic()
            outcome, detail = expect_error(
                lambda: download(
                    url, d / "file.bin", retries=0, progress=False, limits=DownloadLimits(**limits)
                ),
                *needles,
            )
            took = time.monotonic() - t0
        if outcome == NAMED and took > within:
            return WRONG, f"ended after {took:.1f} s, later than the stated {within:g} s; {detail}"
        return outcome, f"{detail} ({took:.1f} s)"

    return run


def _lock_holder(lock: Path) -> subprocess.Popen:
    code = f"""
        import time
        from dmllab.locks import exclusive
        with exclusive({str(lock)!r}):
            print("locked", flush=True)
            time.sleep(60)
        """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))},
    )
    proc.stdout.readline()
    return proc


def _cub_archive(d: Path) -> Path:
    cub = _layouts().make_cub(d / "src" / "CUB_200_2011")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(cub, arcname="CUB_200_2011")
    (d / "CUB_200_2011.tgz").write_bytes(buffer.getvalue())
    return d / "CUB_200_2011.tgz"


def download_cases() -> list[Case]:
    trickle = dict(deadline_s=60, min_rate=100, window_s=2.0, stall_s=3.0)
    cases = [
        Case(
            "downloads",
            "a server trickling a byte every 0.5 s (min rate 100 B/s over 2 s)",
            _timed_download("trickle", trickle, 2.0 + 3.0 + 1.0, "too slow", "file.bin.part"),
            timeout=60,
        ),
        Case(
            "downloads",
            "a server trickling a byte every 20 s (stall timeout 3 s)",
            _timed_download("trickle", trickle, 3.0 + 1.0, "file.bin", gap=20.0),
            timeout=60,
        ),
        Case(
            "downloads",
            "a server that sends headers and stalls",
            _timed_download("stall", dict(trickle, stall_s=1.0), 1.0 + 1.0, "file.bin"),
            timeout=60,
        ),
        Case(
            "downloads",
            "a deadline of 1 s on a download above the minimum rate",
            _timed_download(
                "trickle",
                dict(deadline_s=1.0, min_rate=10, window_s=0.5, stall_s=2.0),
                3.5,
                "deadline",
                gap=0.01,
            ),
            timeout=60,
        ),
    ]

    def full_disk(ctx):
        from dmllab.data.download import download

        d = ctx.folder()
        tiny = _tiny_fs(ctx, kib=32)
        target = (tiny or d) / "file.bin"
        try:
            with _server("fast", body=bytes(1 << 20)) as url:
                if tiny is None:
                    with _enospc():
                        return expect_error(
                            lambda: download(url, target, retries=0, progress=False), str(target)
                        )
                outcome, detail = expect_error(
                    lambda: download(url, target, retries=0, progress=False),
                    f"{target}.part",
                    "no space left",
                )
                return outcome, detail
        finally:
            _unmount(tiny)

    def file_size_limit(ctx):
        d = ctx.folder()
        with _server("fast", body=bytes(1 << 20)) as url:
            code = f"""
                import resource
                resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
                from pathlib import Path
                from dmllab.data.download import download
                from dmllab.data.sources import DownloadError
                try:
                    download({url!r}, Path({str(d / "file.bin")!r}), retries=0, progress=False)
                    print("accepted")
                except DownloadError as err:
                    print("named:", err)
                """
            out = subprocess.run(
                [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
            )
        line = out.stdout.strip()
        if line.startswith("named:") and str(d / "file.bin.part") in line:
            left = [p.name for p in d.iterdir()]
            return (WRONG, f"left {left}; {line[:160]}") if left else (NAMED, line[:160])
        return (WRONG if line == "accepted" else TRACE), (line or out.stderr.strip()[-160:])

    def two_fetches(ctx):
        d = ctx.folder()
        (d / "data").mkdir()
        from dmllab.data.fetch import fetch_lock

        holder = _lock_holder(fetch_lock(d / "data" / "cub"))
        try:
            argv = ["data", "fetch", "cub", str(d / "data" / "cub"), "--from", str(_cub_archive(d))]
            return cli([*argv, "--no-verify", "--quiet"], f"pid {holder.pid} on host {socket.gethostname()}")
        finally:
            holder.kill()
            holder.wait()

    def killed_fetch(ctx):
        d = ctx.folder()
        archive = _cub_archive(d)
        root = d / "data" / "cub"
        code = f"""
            import time
            from dmllab.data import unpack
            write = unpack._Writer.file
            def slow(self, name, source):
                write(self, name, source)
                print("unpacking", flush=True)
                time.sleep(60)
            unpack._Writer.file = slow
            from dmllab.data.fetch import fetch_dataset
            fetch_dataset("cub", {str(root)!r}, archives=[{str(archive)!r}], verify_checksums=False, progress=False)
            """
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True
        )
        child.stdout.readline()
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        before = [p.name for p in root.parent.iterdir()]

        def again():
            from dmllab.data.fetch import fetch_dataset

            fetch_dataset("cub", root, archives=[archive], verify_checksums=False, progress=False)
            return sorted(p.name for p in root.parent.iterdir())

        return expect_value(again, lambda v, w: v == ["cub"] or f"left behind (before: {before})")

    def umask_mode(ctx):
        d = ctx.folder()
        archive = _cub_archive(d)

        def fetch():
            from dmllab.data.fetch import fetch_dataset

            old = os.umask(0o022)
            try:
                fetch_dataset(
                    "cub", d / "data" / "cub", archives=[archive], verify_checksums=False, progress=False
                )
            finally:
                os.umask(old)
            return oct(stat.S_IMODE((d / "data" / "cub").stat().st_mode))

        return expect_value(fetch, lambda v, w: v == "0o755" or "not 0o755 under umask 022")

    cases += [
        Case("downloads", "a full disk while downloading", full_disk),
        Case("downloads", "a file-size limit (ulimit -f) while downloading", file_size_limit, timeout=90),
        Case("downloads", "two fetches into one ROOT", two_fetches, timeout=60),
        Case("downloads", "a fetch killed (-9) while unpacking, then run again", killed_fetch, timeout=90),
        Case("downloads", "ROOT's mode under umask 022", umask_mode),
    ]
    return cases


# ------------------------------------------------------------------------------------------------ bounds
def bound_cases() -> list[Case]:
    train = ["train", "--method", "proxynca++", "--dataset", "synthetic", "--profile", "smoke", "--quiet"]

    def workers(value: int | None):
        def run(ctx):
            if value is None:
                from dmllab.validation import usable_cores

                n = usable_cores() + 1
            else:
                n = value
            t0 = time.monotonic()
            outcome, detail = cli([*train, "--set", f"data.num_workers={n}"], "data.num_workers", "cores")
            if time.monotonic() - t0 > 30:
                return WRONG, f"refused only after {time.monotonic() - t0:.0f} s; {detail}"
            return outcome, detail

        shown = "<usable cores + 1>" if value is None else value
        return Case("bounds", f"--set data.num_workers={shown}", run, timeout=60)

    def workers_ok(ctx):
        from dmllab.training import apply_overrides, presets
        from dmllab.validation import usable_cores

        cfg = presets.get("proxynca++", "synthetic", "smoke")
        return expect_value(
            lambda: apply_overrides(cfg, [f"data.num_workers={usable_cores()}"]).data.num_workers,
            lambda v, w: v == usable_cores(),
        )

    def cache_workers(ctx):
        return cli(["data", "cache", "cub", str(ctx.folder()), "--workers", "10000", "--quiet"], "--workers")

    def setup(name: str, value: object):
        def run(ctx):
            from dmllab.pipeline import notebook as nb

            namespace = {"profile": "smoke", "device": "cpu", name: value}
            return expect_error(lambda: nb.setup(namespace, "pnpp_fig3_two_moons"), f"parameter {name}")

        return Case("bounds", f"notebook setup {name}={value!r}", run)

    cases = [workers(v) for v in (10000, None)]
    cases.append(Case("bounds", "data.num_workers = the usable cores", workers_ok))
    cases.append(Case("bounds", "data cache --workers 10000", cache_workers))
    cases += [
        setup(n, v)
        for n, v in (("steps", 0), ("temperatures", [1.0, 0.0]), ("lr", -0.01), ("fast_dev_run", -1))
    ]
    return cases


def boundary_cases() -> list[Case]:
    return security_cases() + index_cases() + download_cases() + bound_cases()
