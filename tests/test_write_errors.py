"""Every write error names its file and leaves no temporary file: a file-size limit (EFBIG, also when numpy's short
write carries no errno), a full disk (ENOSPC); and a lock names its holder while waiting and when it gives up."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from dmllab import locks, results
from dmllab.cli import error_message

REPO = Path(__file__).resolve().parent.parent


def _under_size_limit(code: str, limit: int = 4096) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter whose files may grow to ``limit`` bytes (``ulimit -f``)."""
    script = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        """
    ) + textwrap.dedent(code)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )


def test_a_file_size_limit_names_the_result_file(tmp_path):
    out = _under_size_limit(
        f"""
        from dmllab import results
        from dmllab.cli import error_message
        rows = [dict(experiment="e", paper="p", artifact="a", profile="q", metric=f"m{{i}}", value=i)
                for i in range(500)]
        try:
            results.write_rows({str(tmp_path / "r.csv")!r}, rows)
        except OSError as err:
            print(err.errno, error_message(err))
        """
    )
    code, message = out.stdout.strip().split(" ", 1)
    assert int(code) == errno.EFBIG, out.stderr
    assert message.startswith(f"file too large writing {tmp_path / 'r.csv'}") and "ulimit -f" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks"]  # no CSV, no temporary file


def test_a_short_write_under_a_size_limit_is_not_a_failing_disk(tmp_path):
    """numpy reports a write cut short by the limit without an errno: it is named as the limit, not as EIO."""
    out = _under_size_limit(
        f"""
        import numpy as np
        from dmllab.fileio import naming
        from dmllab.cli import error_message
        path = {str(tmp_path / "images.npy")!r}
        try:
            with naming(path, "writing"):
                np.save(path, np.zeros(100_000))
        except OSError as err:
            print(err.errno, error_message(err))
        """
    )
    code, message = out.stdout.strip().split(" ", 1)
    assert int(code) == errno.EFBIG, out.stdout + out.stderr
    assert message.startswith(f"file too large writing {tmp_path / 'images.npy'}")
    assert "disk may be failing" not in message


def test_a_full_disk_names_the_table_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    real_write = os.write

    def full(fd, data):  # the disk fills up after the first 100 bytes of the table
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path)):
            if len(data) > 100:
                return real_write(fd, bytes(data)[:100])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    path = tmp_path / "e.tsne.csv"
    results.write_table(path, pd.DataFrame({"x": [1.0]}), profile="quick", device="cpu")
    before = path.read_bytes()
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as info:
        results.write_table(path, pd.DataFrame({"x": range(1000)}), profile="smoke", device="cpu")
    assert error_message(info.value).startswith(f"no space left on device writing {path}")
    assert path.read_bytes() == before  # the old table stays whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks", "e.tsne.csv"]


def test_a_waiting_lock_names_its_holder_and_a_timeout_names_the_file(tmp_path, capfd):
    lock = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                sys.path.insert(0, {str(REPO)!r})
                from dmllab.locks import exclusive
                with exclusive({str(lock)!r}):
                    print("locked", flush=True)
                    time.sleep(60)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        info = json.loads(lock.read_text())
        assert info["pid"] == holder.pid and info["host"] and info["since"]
        with pytest.raises(locks.LockTimeout) as stop:
            with locks.exclusive(
                lock, waiting=lambda who: f"waiting for {who}", timeout=1.0, what="writing x"
            ):
                pass
        said = capfd.readouterr().err
        assert f"waiting for pid {holder.pid} on host {info['host']}, since " in said
        text = str(stop.value)
        assert text.startswith(
            f"writing x: waited 1 s for the lock {lock}, held by pid {holder.pid} on host "
        )
        assert error_message(stop.value) == text  # the CLI shows it as it is: one line
    finally:
        holder.kill()
        holder.wait()
    with locks.exclusive(lock, timeout=5.0):  # free once its holder is gone
        assert json.loads(lock.read_text())["pid"] == os.getpid()
