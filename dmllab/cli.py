"""The ``dmllab`` command line: one parser, sub-commands contributed by the packages that own them."""

from __future__ import annotations

import argparse
import importlib
import sys

from dmllab.errors import EXPECTED_ERRORS, error_message, report_error  # noqa: F401 - one-line errors

# Modules that contribute sub-commands through ``add_commands(subparsers)``. Imported when the CLI starts, so
# ``import dmllab`` stays cheap.
_COMMAND_MODULES = (
    "dmllab.training.cli",
    "dmllab.data.cli",
    "dmllab.pipeline.cli",
    "dmllab.pipeline.tune_cli",
    "dmllab.training.curves",
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors cut a long value as every dmllab error does (its sub-commands' parsers
    are of the same class)."""

    def error(self, message: str):  # type: ignore[override]
        from dmllab.errors import cut_word

        super().error(" ".join(cut_word(w) for w in message.split()))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
    from dmllab.paths import resolve_folders
    from dmllab.validation import check_environment

    try:  # before any command: an invalid DMLLAB_* variable is one line, not a surprise later
        check_environment()
        resolve_folders()  # relative folders made absolute once: the study's workers and kernels agree
    except ValueError as err:
        return report_error(err, debug=debug)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.debug = debug
    args.parser = parser  # for a command that documents the command line (dmllab docs)
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
