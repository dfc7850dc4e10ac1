"""The ``dmllab`` command line: one parser, sub-commands contributed by the packages that own them."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute sub-commands through ``add_commands(subparsers)``. Imported when the CLI starts, so
# ``import dmllab`` stays cheap.
_COMMAND_MODULES = ("dmllab.training.cli", "dmllab.data.cli", "dmllab.pipeline.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dmllab",
        description="Reproducibility study of proxy-based deep metric learning (ProxyNCA++ and friends).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
