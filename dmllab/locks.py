"""Exclusive locks between processes: :func:`exclusive`, one ``filelock.FileLock`` that names its holder.

The holder writes who it is into the lock file (pid, host, process start time, boot id, since when). A process
that finds the lock taken says so on stderr, naming the holder (``pid 4242 on host node7, since 14:03:12``), and
waits; with a ``timeout`` it gives up with a :class:`LockTimeout` that names the holder and the lock file. A lock
whose recorded holder no longer runs on this host (its pid gone, reused by another process, or from an earlier
boot) while the lock is still held, by a process that inherited the holder's descriptor (a data-loader worker),
is taken over: the lock file is removed and a fresh one locked. The lock files stay in place after release, so
every waiter always locks the file at the lock path.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dmllab.fileio import naming, warn

# How often a waiting process checks whether the holder still runs (and whether its timeout has passed).
POLL_S = 0.5


class LockTimeout(TimeoutError):
    """A lock stayed held longer than the caller waits; the message names the lock file and its holder."""


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (field 22 of /proc/<pid>/stat, clock ticks since boot), None where
    /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()[19]  # fields after the command name; starttime is the 22nd field


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None


def holder_info() -> dict[str, Any]:
    """This process as a lock holder: pid, host, start time, boot id, since (seconds since the epoch)."""
    pid = os.getpid()
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "start": _process_start(pid),
        "boot": _boot_id(),
        "since": time.time(),
    }


def read_holder(path: str | os.PathLike) -> dict[str, Any]:
    """The holder recorded in the lock file ``path`` ({} when it records none or cannot be read)."""
    try:
        info = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def holder_alive(info: dict[str, Any]) -> bool:
    """Whether the process recorded in a lock file still runs. A holder on another host, or one recorded without
    a pid, counts as running (nothing to judge by); a pid reused by another process, or one of an earlier boot,
    does not."""
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0 or info.get("host", socket.gethostname()) != socket.gethostname():
        return True
    if info.get("boot") and _boot_id() and info["boot"] != _boot_id():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    start = _process_start(pid)
    return not (info.get("start") and start and start != info["start"])


def describe(info: dict[str, Any]) -> str:
    """``pid 4242 on host node7, since 14:03:12`` (what is known of the holder); ``an unknown process``."""
    if not info.get("pid"):
        return "an unknown process"
    since = info.get("since")
    when = (
        f", since {time.strftime('%H:%M:%S', time.localtime(since))}"
        if isinstance(since, (int, float))
        else ""
    )
    host = f" on host {info['host']}" if info.get("host") else ""
    return f"pid {info['pid']}{host}{when}"


def _take_over(path: Path, holder: dict[str, Any]) -> bool:
    """Remove the lock file ``path`` of the dead ``holder`` if it is still the file read; whether it was."""
    try:
        before = os.stat(path).st_ino
        if read_holder(path) != holder or os.stat(path).st_ino != before:
            return False
        path.unlink()
    except FileNotFoundError:
        return False
    return True


@contextmanager
def exclusive(
    path: str | os.PathLike,
    *,
    waiting: Callable[[str], str] | None = None,
    notice_s: float = 0.0,
    timeout: float | None = None,
    what: str = "the lock",
) -> Iterator[None]:
    """Hold the exclusive lock file ``path`` (``filelock.FileLock``; its folder is created) while the block runs.

    Args:
        path: the lock file.
        waiting: ``waiting(holder)`` is the line said once on stderr when the lock is held by another process
            (``holder`` as :func:`describe` writes it); None: wait silently.
        notice_s: say it only after waiting this long (0: at once).
        timeout: give up after this many seconds (None: wait for ever).
        what: what the lock protects, for the timeout's message.

    Raises LockTimeout: still held after ``timeout`` seconds, naming the holder and ``path``."""
    from filelock import FileLock, Timeout

    path = Path(path)
    with naming(path.parent, "writing"):
        path.parent.mkdir(parents=True, exist_ok=True)
    start, said, wait = time.monotonic(), False, 0.0
    while True:
        lock = FileLock(str(path))
        try:
            lock.acquire(timeout=wait)  # filelock polls within the wait (its Timeout carries no errno)
            break
        except Timeout:
            wait = POLL_S
            holder = read_holder(path)
            if holder and not holder_alive(holder):
                if _take_over(path, holder):
                    warn(
                        f"the lock {path} is held for {describe(holder)}, which is no longer running; taking it over"
                    )
                continue
            waited = time.monotonic() - start
            if timeout is not None and waited >= timeout:
                raise LockTimeout(
                    f"{what}: waited {waited:.0f} s for the lock {path}, held by {describe(holder)}; if that process "
                    f"no longer runs, remove {path}"
                ) from None
            if waiting is not None and not said and waited >= notice_s:
                warn(waiting(describe(holder)))
                said = True
    try:
        try:
            with open(path, "r+") as fh:  # the same inode filelock holds: flock locks files, not descriptors
                fh.truncate()
                fh.write(json.dumps(holder_info()))
        except OSError:
            pass  # a holder that cannot be named still holds the lock
        yield
    finally:
        lock.release()


def is_held(path: str | os.PathLike) -> bool:
    """Whether a process holds the lock file ``path`` now (False when it does not exist). Tries to take it without
    waiting and lets it go at once; a holder's record (:func:`read_holder`) stays in the file after release, so it
    cannot tell."""
    from filelock import FileLock, Timeout

    if not Path(path).is_file():
        return False
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    except OSError:  # a store that cannot be written (read-only): nothing to tell by
        return False
    lock.release()
    return False
