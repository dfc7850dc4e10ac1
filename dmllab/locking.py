"""An exclusive lock that names its holder: the run store's per-run lock and ``dmllab data fetch``'s lock on a
dataset folder.

The holder writes its pid, host, process start time, boot id and the time it took the lock into the lock file
(JSON). A process that finds the lock taken reads that record: it says at once who holds it (and waits, or gives
up with :class:`LockHeldError`); a lock whose recorded holder no longer runs (the lock survives in a process that
inherited its file, e.g. a data-loader worker) is taken over. The lock file is removed when the holder leaves, so a
failed run leaves no lock file behind; that is safe because a process that acquires the lock checks that the file
it locked is still the one at the lock path, and starts over if not.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dmllab.fileio import naming, warn

# How often a process waiting for a lock checks whether the holder is still alive.
LOCK_POLL_S = 0.5


class LockHeldError(OSError):
    """The lock is held by a running process (``wait=False``); the message names the holder and the lock file."""


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
    """This process as a lock holder: pid, host, process start time, boot id, and now."""
    pid = os.getpid()
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "start": _process_start(pid),
        "boot": _boot_id(),
        "since": time.time(),
    }


def holder_alive(info: dict[str, Any]) -> bool:
    """Whether the process recorded in a lock file still runs (a pid reused by another process, or one of an
    earlier boot, does not count; a holder on another host is taken to be alive)."""
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return True  # nothing to judge by: keep waiting
    if info.get("host") not in (None, socket.gethostname()):
        return True  # cannot be checked from here
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


def describe_holder(info: dict[str, Any]) -> str:
    """``pid 123 on host h, since 12:00:01`` (the parts the record holds)."""
    text = f"pid {info.get('pid', '?')}"
    if info.get("host"):
        text += f" on host {info['host']}"
    since = info.get("since")
    if isinstance(since, int | float):
        text += f", since {time.strftime('%H:%M:%S', time.localtime(since))}"
    return text


def _read_holder(fh: Any) -> dict[str, Any]:
    try:
        fh.seek(0)
        info = json.loads(fh.read() or "{}")
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _acquire(path: Path, busy: str, then: str, wait: bool, name: str) -> Any:
    """Lock ``path`` (exclusive ``flock``) and write this process into it; see :func:`holder_lock`."""
    said = False
    while True:
        with naming(path.parent, "writing"):
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with naming(path, "writing"):
                fh = open(path, "a+")  # noqa: SIM115  (returned, closed by the caller)
        except FileNotFoundError:  # the folder was removed by the previous holder meanwhile
            continue
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fh)
            if holder and not holder_alive(holder):
                warn(
                    f"{name}: the lock {path} is held for pid {holder.get('pid')}, which is no longer running; "
                    "taking it over"
                )
                try:  # only the file we opened: a new holder's fresh lock file stays
                    if os.stat(path).st_ino == os.fstat(fh.fileno()).st_ino:
                        path.unlink()
                except FileNotFoundError:
                    pass
                fh.close()
                continue
            fh.close()
            message = f"{busy} by another process ({describe_holder(holder)}; lock {path})"
            if not wait:
                raise LockHeldError(f"{message}; {then}") from None
            if not said:
                warn(f"{message}: {then}")
                said = True
            time.sleep(LOCK_POLL_S)
            continue
        try:
            if os.stat(path).st_ino == os.fstat(fh.fileno()).st_ino:
                fh.seek(0)
                fh.truncate()
                fh.write(json.dumps(holder_info()))
                fh.flush()
                return fh
        except FileNotFoundError:
            pass
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()  # we locked a file the previous holder had already removed: try again


@contextmanager
def holder_lock(
    path: str | os.PathLike, *, name: str, busy: str, then: str, wait: bool = True
) -> Iterator[None]:
    """Hold the exclusive lock ``path`` for the block (module docstring).

    Args:
        name: what is locked, for the take-over warning (``run <key>/seed0``).
        busy: the start of the line said when a live process holds the lock (``run X is being trained``); the
            holder and the lock file follow.
        then: what happens next (``waiting for it, then reading its result``), or, with ``wait=False``, what to
            do (``wait for it to finish``).
        wait: wait for the holder (saying so once on stderr); False raises :class:`LockHeldError` instead.

    The lock file is removed when the block ends (while the lock is still held).
    """
    path = Path(path)
    fh = _acquire(path, busy, then, wait, name)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # while holding the lock (module docstring)
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()
