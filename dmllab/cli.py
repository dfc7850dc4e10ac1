"""The ``dmllab`` command line: one parser, sub-commands contributed by the packages that own them."""

from __future__ import annotations

import argparse
import errno
import importlib
import sys

# Modules that contribute sub-commands through ``add_commands(subparsers)``. Imported when the CLI starts, so
# ``import dmllab`` stays cheap.
_COMMAND_MODULES = ("dmllab.training.cli", "dmllab.data.cli", "dmllab.pipeline.cli")


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
        if not isinstance(err, (ValueError, KeyError, OSError, FloatingPointError, RuntimeError)):
            text = f"{type(err).__name__}: {text}"
    hint = getattr(err, "hint", None)
    if hint:
        text = f"{text}; {hint}"
    return " ".join(text.split())  # one line, whatever the message held


def report_error(err: BaseException, *, debug: bool = False, code: int = 2, expected: bool = True) -> int:
    """Print ``dmllab: error: <one line>`` on stderr and return ``code``; for an unexpected error type the
    line asks for ``--debug``. With ``debug`` re-raise ``err`` instead (call it inside the ``except``
    block, so that the traceback is the original one)."""
    if debug:
        raise err
    suffix = "" if expected else " (rerun with --debug for the traceback)"
    print(f"dmllab: error: {error_message(err)}{suffix}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dmllab",
        description="Reproducibility study of proxy-based deep metric learning (ProxyNCA++ and friends).",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the full traceback of an error (accepted anywhere)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Every failure ends in one line ``dmllab: error: ...`` on stderr and a non-zero exit
    status (2 for the library's expected errors, 1 otherwise); ``--debug`` (anywhere on the command line)
    shows the traceback instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    from dmllab.validation import check_environment

    try:  # before any command: an invalid DMLLAB_* variable is one line, not a surprise later
        check_environment()
    except ValueError as err:
        return report_error(err, debug=debug)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.debug = debug
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        print("dmllab: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001  (the one place that turns any failure into one line)
        expected = isinstance(err, EXPECTED_ERRORS)
        return report_error(err, debug=debug, code=2 if expected else 1, expected=expected)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
