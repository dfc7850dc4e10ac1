"""One-line errors for a user: what failed, naming the file, key or value, and what to do.

Every command line entry point (``dmllab ...``) turns an expected failure into ``dmllab: error: <one line>`` on
stderr through :func:`report_error`; this module sits below every package that owns commands, so each of them can
use it.
"""

from __future__ import annotations

import errno
import sys

# What an OSError means and what to do about it, by errno: the message a user sees instead of a traceback.
_ROOM = "free some space or set DMLLAB_RESULTS / DMLLAB_CACHE to a disk with room"
_OS_HINTS = {
    errno.ENOSPC: ("no space left on device", _ROOM),
    errno.EDQUOT: ("disk quota exceeded", _ROOM),
    errno.EROFS: ("read-only file system", "set DMLLAB_RESULTS / DMLLAB_CACHE to a writable folder"),
    errno.EACCES: (
        "permission denied",
        "check its permissions (or point DMLLAB_RESULTS / DMLLAB_CACHE elsewhere)",
    ),
    errno.EPERM: (
        "operation not permitted",
        "check its permissions (or point DMLLAB_RESULTS / DMLLAB_CACHE elsewhere)",
    ),
    errno.EFBIG: (
        "file too large",
        "the file-size limit (ulimit -f) or the file system's largest file was reached: raise the limit or "
        "write to another disk",
    ),
    errno.EIO: ("input/output error", "the disk may be failing: check it, or move the file elsewhere"),
}
# The library's expected errors: bad input, missing or damaged files, a full disk, a diverged training. One line
# and exit status 2; anything else is a bug, reported with its type (exit status 1).
EXPECTED_ERRORS = (ValueError, KeyError, OSError, FloatingPointError)
# Errors that can only come from writing.
_WRITE_ONLY = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)


def error_message(err: BaseException) -> str:
    """One line for a user: what failed, naming the file, key or value, and what to do.

    OSErrors with a known errno (full disk, read-only or forbidden file) name the file, whether it was being
    read or written (where dmllab knows: :func:`dmllab.fileio.naming`) and what to do; exceptions that are not
    the library's expected error types keep their type name so that a bug report stays informative.
    """
    if isinstance(err, KeyError) and err.args:
        text = str(err.args[0])
    elif isinstance(err, OSError) and err.errno in _OS_HINTS:
        what, todo = _OS_HINTS[err.errno]
        action = "writing" if err.errno in _WRITE_ONLY else getattr(err, "dmllab_action", None)
        where = (
            f" {action} {err.filename}"
            if action and err.filename
            else (f": {err.filename}" if err.filename else "")
        )
        text = f"{what}{where} ({err.strerror or err}); {todo}"
    else:
        text = str(err) or type(err).__name__
        if not isinstance(err, (*EXPECTED_ERRORS, RuntimeError)):
            text = f"{type(err).__name__}: {text}"
    hint = getattr(err, "hint", None)
    if hint:
        text = f"{text}; {hint}"
    return " ".join(cut_word(word) for word in text.split())  # one line, whatever the message held


#: The longest word an error message repeats whole (a 100,000-character ``--set`` value is cut, not echoed).
MAX_WORD = 200


def cut_word(word: str) -> str:
    return word if len(word) <= MAX_WORD else f"{word[:80]}...[{len(word):,} characters]"


def report_error(err: BaseException, *, debug: bool = False, code: int = 2, expected: bool = True) -> int:
    """Print ``dmllab: error: <one line>`` on stderr and return ``code``; for an unexpected error type the
    line asks for ``--debug``. With ``debug`` re-raise ``err`` instead (call it inside the ``except``
    block, so that the traceback is the original one)."""
    if debug:
        raise err
    suffix = "" if expected else " (rerun with --debug for the traceback)"
    print(f"dmllab: error: {error_message(err)}{suffix}", file=sys.stderr)
    return code
