"""``dmllab study``, ``dmllab report`` and ``dmllab notebooks``."""

from __future__ import annotations

import argparse
import sys

from dmllab.pipeline.artifacts import PROFILES


def _study(args: argparse.Namespace) -> int:
    from dmllab.pipeline.report import build_report
    from dmllab.pipeline.study import format_summary, run_study

    try:
        results = run_study(
            args.profile,
            only=args.only,
            jobs=args.jobs,
            data_root=args.data_root,
            device=args.device,
            progress=not args.no_progress,
        )
    except ValueError as err:
        print(f"dmllab study: {err}", file=sys.stderr)
        return 2
    print(format_summary(results))
    report = build_report(args.profile)
    print(f"report: {report}")
    return 1 if any(r.status != "ok" for r in results) else 0


def _report(args: argparse.Namespace) -> int:
    from dmllab.pipeline.report import build_report

    print(f"report: {build_report(args.profile)}")
    return 0


def _notebooks(args: argparse.Namespace) -> int:
    from dmllab.pipeline.notebook import stale_notebooks, write_all

    if args.check:
        stale = stale_notebooks()
        if stale:
            print(f"out of date (run `dmllab notebooks`): {', '.join(stale)}", file=sys.stderr)
            return 1
        print("all notebooks match their artifacts")
        return 0
    for path in write_all():
        print(f"wrote {path}")
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``study``, ``report`` and ``notebooks`` on the ``dmllab`` parser."""
    study = subparsers.add_parser(
        "study",
        help="run the notebooks with papermill and build the report",
        description="Run notebooks/*.ipynb with papermill (executed copies in results/executed/<profile>/), "
        "then print a summary and build figures/report.html. Exit code 1 if a notebook failed, 2 for bad input.",
    )
    study.add_argument(
        "--profile", choices=PROFILES, default="quick", help="parameter profile (default: quick)"
    )
    study.add_argument(
        "--only", metavar="PATTERN", help="comma-separated globs or substrings of notebook names"
    )
    study.add_argument("--jobs", type=int, default=1, help="notebooks run at the same time (default: 1)")
    study.add_argument("--data-root", help="folder of the benchmark datasets (passed as data_root)")
    study.add_argument("--device", help="auto | cpu | cuda | mps (default: each notebook's own, auto)")
    study.add_argument("--no-progress", action="store_true", help="no progress bar")
    study.set_defaults(func=_study)

    report = subparsers.add_parser("report", help="build figures/report.html from results/")
    report.add_argument(
        "--profile", choices=PROFILES, default=None, help="default: paper, quick or smoke, as present"
    )
    report.set_defaults(func=_report)

    notebooks = subparsers.add_parser(
        "notebooks", help="regenerate notebooks/*.ipynb from the artifact registry"
    )
    notebooks.add_argument(
        "--check", action="store_true", help="only check that the notebooks are up to date"
    )
    notebooks.set_defaults(func=_notebooks)
