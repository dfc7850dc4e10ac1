"""Downloads are bounded in time and name the file they cannot write.

A local HTTP server (127.0.0.1, ephemeral port) trickles, stalls or fails on purpose; the limits are passed small
(:class:`~dmllab.data.download.DownloadLimits`) so that each case ends in about a second.
"""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dmllab.data import download as download_mod
from dmllab.data.download import DownloadLimits, download
from dmllab.data.sources import DownloadError

BODY = bytes(range(256)) * 256  # 64 KiB


class Server:
    """``mode``: ``fast`` (the whole body), ``halves`` (half the body, a pause, the rest), ``trickle`` (one byte
    every ``gap`` s), ``stall`` (headers, then nothing), ``busy-once`` (HTTP 503 to the first request, then the
    body)."""

    def __init__(self) -> None:
        self.mode, self.gap, self.requests = "fast", 0.2, 0
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                server.requests += 1
                if server.mode == "busy-once" and server.requests == 1:
                    self.send_error(503)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(BODY)))
                self.end_headers()
                try:
                    if server.mode == "trickle":
                        for byte in BODY:
                            if server.stop.wait(server.gap):
                                return
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                    elif server.mode == "stall":
                        server.stop.wait(30)
                    elif server.mode == "halves":
                        self.wfile.write(BODY[: len(BODY) // 2])
                        self.wfile.flush()
                        server.stop.wait(0.2)
                        self.wfile.write(BODY[len(BODY) // 2 :])
                    else:
                        self.wfile.write(BODY)
                except OSError:  # the client gave up
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/file.bin"


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    thread = threading.Thread(target=srv.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.stop.set()
    srv.httpd.shutdown()
    srv.httpd.server_close()


def test_a_trickling_server_ends_in_a_named_error_within_window_plus_stall(server, tmp_path):
    server.mode, server.gap = "trickle", 0.2  # 5 bytes per second
    limits = DownloadLimits(deadline_s=60, min_rate=100, window_s=1.0, stall_s=2.0)
    t0 = time.monotonic()
    with pytest.raises(
        DownloadError, match=r"is too slow: [\d.e+-]+ B/s over the last 1 s, below the minimum 100 B/s"
    ):
        download(server.url, tmp_path / "file.bin", retries=0, progress=False, limits=limits)
    elapsed = time.monotonic() - t0
    assert elapsed < limits.window_s + limits.stall_s + 1.0, elapsed
    part = tmp_path / "file.bin.part"
    assert part.is_file() and 0 < part.stat().st_size < 20  # kept for a re-run


def test_the_deadline_ends_a_download_that_keeps_the_minimum_rate(server, tmp_path):
    server.mode, server.gap = "trickle", 0.01  # about 100 bytes per second, above min_rate
    limits = DownloadLimits(deadline_s=1.0, min_rate=10, window_s=0.5, stall_s=2.0)
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match=r"did not finish within 1 s \(the deadline\).*re-run"):
        download(server.url, tmp_path / "file.bin", retries=0, progress=False, limits=limits)
    assert time.monotonic() - t0 < limits.deadline_s + limits.stall_s + 1.0


def test_a_stalled_server_ends_after_the_stall_timeout(server, tmp_path, monkeypatch):
    monkeypatch.setattr(download_mod, "RETRY_WAIT_S", 0.01)
    server.mode = "stall"
    limits = DownloadLimits(deadline_s=60, min_rate=10, window_s=10, stall_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match=server.url):
        download(server.url, tmp_path / "file.bin", retries=1, progress=False, limits=limits)
    assert time.monotonic() - t0 < 2 * (limits.stall_s + download_mod.RETRY_WAIT_S) + 2.0
    assert not (tmp_path / "file.bin.part").exists()  # nothing arrived: nothing kept


def test_a_busy_server_is_retried_with_back_off(server, tmp_path, monkeypatch):
    monkeypatch.setattr(download_mod, "RETRY_WAIT_S", 0.01)
    server.mode = "busy-once"
    part = download(server.url, tmp_path / "file.bin", retries=1, progress=False)
    assert part.read_bytes() == BODY and server.requests == 2


@pytest.mark.parametrize(
    ("code", "words"),
    [(errno.ENOSPC, "no space left on device"), (errno.EDQUOT, "disk quota exceeded")],
)
def test_a_full_disk_names_the_part_file(code, words, server, tmp_path, monkeypatch):
    real_open = open

    class Full(io.RawIOBase):
        def __init__(self, fh, budget: int) -> None:
            self.fh, self.budget = fh, budget

        def writable(self) -> bool:
            return True

        def write(self, b) -> int:
            if self.budget <= 0:
                raise OSError(code, os.strerror(code))
            self.budget -= len(b)
            return self.fh.write(b)

        def close(self) -> None:
            self.fh.close()

    def full_open(path, mode="r", *args, **kwargs):
        return Full(real_open(path, mode, *args, **kwargs), budget=1)  # the first write passes

    monkeypatch.setattr(download_mod, "open", full_open, raising=False)
    server.mode = "halves"
    part = tmp_path / "file.bin.part"
    with pytest.raises(DownloadError) as err:
        download(server.url, tmp_path / "file.bin", retries=0, progress=False)
    message = str(err.value)
    assert (
        f"cannot write {part}: {words} after" in message and "--downloads" in message and "\n" not in message
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "file.bin.part"
    ]  # the bytes written: kept to resume


def test_a_file_size_limit_is_named_and_leaves_no_partial_file(server, tmp_path):
    """A real ``ulimit -f`` in a child process: Python ignores SIGXFSZ, so the write fails with EFBIG."""
    code = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
        from pathlib import Path
        from dmllab.data.download import download
        from dmllab.data.sources import DownloadError
        try:
            download({server.url!r}, Path({str(tmp_path / "file.bin")!r}), retries=0, progress=False)
        except DownloadError as err:
            print(err)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    line = out.stdout.strip()
    assert line.startswith(f"cannot write {tmp_path / 'file.bin.part'}: the file-size limit"), out
    assert list(tmp_path.iterdir()) == []
