"""``dmllab data fetch|check|cache``: get a dataset, verify a dataset folder, or write its resized cache."""

from __future__ import annotations

import argparse


def _fail(err: BaseException, args: argparse.Namespace) -> int:
    from dmllab.errors import report_error

    return report_error(err, debug=getattr(args, "debug", False), code=1)


def _check(args: argparse.Namespace) -> int:
    from dmllab.data.check import check_dataset

    try:
        report = check_dataset(args.name, args.root, check_counts=not args.no_counts, progress=not args.quiet)
    except (KeyError, OSError, ValueError) as err:
        return _fail(err, args)
    print(report.summary())
    return 0 if report.ok else 1


def _cache(args: argparse.Namespace) -> int:
    from dmllab.data.cache import build_cache
    from dmllab.validation import MAX_SIZE, check_int, usable_cores

    try:
        check_int("--shorter-side", args.shorter_side, low=8, high=MAX_SIZE, why="a JPEG's side")
        check_int("--workers", args.workers, high=usable_cores(), why="the CPU cores this process may use")
        if not 1 <= args.quality <= 100:
            raise ValueError(f"--quality must be a JPEG quality in 1..100, got {args.quality}")
        out = build_cache(
            args.name,
            args.root,
            args.out,
            shorter_side=args.shorter_side,
            quality=args.quality,
            workers=args.workers,
            progress=not args.quiet,
        )
    except (KeyError, OSError, ValueError) as err:
        return _fail(err, args)
    print(f"cached {args.name} at {out}")
    print(f"use root={out}")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from dmllab.data import fetch
    from dmllab.data.check import check_dataset
    from dmllab.validation import check_number

    try:
        limits = fetch.DownloadLimits(
            deadline_s=60 * check_number("--deadline", args.deadline, low=0, low_open=True),
            min_rate=1024 * check_number("--min-rate", args.min_rate, low=0),
        )
        result = fetch.fetch_dataset(
            args.name,
            args.root,
            archives=args.archives,
            downloads=args.downloads,
            keep_archives=args.keep_archives,
            verify_checksums=not args.no_verify,
            limits=limits,
            progress=not args.quiet,
            echo=print,
        )
        report = check_dataset(
            args.name, result.root, check_counts=not args.no_counts, progress=not args.quiet
        )
    except (KeyError, OSError, ValueError) as err:
        return _fail(err, args)
    print(report.summary())
    if report.ok:
        print(f"use root={result.root}")
    return 0 if report.ok else 1


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``data fetch``, ``data check`` and ``data cache`` on the top-level ``dmllab`` parser."""
    from dmllab.data.download import DownloadLimits

    data = subparsers.add_parser(
        "data",
        help="get, verify or cache a dataset folder",
        description="The benchmark datasets (CUB-200-2011, Cars196, Stanford Online Products, In-Shop): fetch "
        "one into a folder, check a folder, or write a pre-resized copy. See docs/guide/datasets.md.",
    )
    data.set_defaults(func=lambda args: (data.print_help(), 2)[1])
    sub = data.add_subparsers(dest="data_command", metavar="ACTION")

    fetch = sub.add_parser(
        "fetch",
        help="download (or take with --from) a dataset's archives, verify, unpack into ROOT, run data check",
        description="Download the official archives of dataset NAME (resumable; checksums verified), unpack "
        "them into ROOT in the layout the loaders read, and run 'data check'. A dataset without a working "
        "download (cars, inshop) needs its files with --from. See docs/guide/datasets.md.",
    )
    fetch.add_argument("name", help="dataset name: cub, cars, sop, inshop")
    fetch.add_argument("root", help="the dataset folder to create (the root the loaders read)")
    fetch.add_argument(
        "--from",
        dest="archives",
        action="append",
        default=[],
        metavar="ARCHIVE",
        help="use this file instead of downloading it (repeat for each file of a dataset)",
    )
    fetch.add_argument("--downloads", default=None, help="folder for downloads (default: ROOT's parent)")
    fetch.add_argument(
        "--keep-archives", action="store_true", help="keep downloaded archives after unpacking"
    )
    fetch.add_argument(
        "--no-verify",
        action="store_true",
        help="unpack even if a checksum differs from the published one (the manifest records it)",
    )
    limits = DownloadLimits()
    fetch.add_argument(
        "--deadline",
        type=float,
        default=limits.deadline_s / 60,
        metavar="MINUTES",
        help="stop each download after this long; a re-run resumes it",
    )
    fetch.add_argument(
        "--min-rate",
        type=float,
        default=limits.min_rate / 1024,
        metavar="KIB_PER_S",
        help=f"stop a download slower than this over {limits.window_s:g} s; a re-run resumes it",
    )
    fetch.add_argument("--no-counts", action="store_true", help="data check: skip the canonical counts")
    fetch.add_argument("--quiet", action="store_true", help="no progress bars")
    fetch.set_defaults(func=_fetch)

    check = sub.add_parser(
        "check",
        help="verify counts and decode every image of a dataset folder",
        description="Read dataset NAME's index files in ROOT, check the canonical image and class counts "
        "(--no-counts: a partial copy) and decode every image; prints what is wrong, exit code 1 if anything is.",
    )
    check.add_argument("name", help="dataset name: cub, cars, sop, inshop")
    check.add_argument("root", help="the dataset folder (see docs/guide/datasets.md)")
    check.add_argument("--no-counts", action="store_true", help="skip the canonical image/class counts")
    check.add_argument("--quiet", action="store_true", help="no progress bar")
    check.set_defaults(func=_check)

    cache = sub.add_parser(
        "cache",
        help="write a pre-resized copy (same layout) and print the root to use",
        description="Write a copy of dataset NAME's folder with every image resized to --shorter-side pixels "
        "(same layout and index files, so the loaders read it as they read ROOT) and print the root to pass "
        "as --data-root: reading small JPEGs makes each epoch faster.",
    )
    cache.add_argument("name", help="dataset name: cub, cars, sop, inshop")
    cache.add_argument("root", help="the dataset folder")
    cache.add_argument("--out", default=None, help="destination (default <cache>/datasets/<name>-<side>)")
    cache.add_argument("--shorter-side", type=int, default=288, help="target shorter side in pixels (288)")
    cache.add_argument("--quality", type=int, default=95, help="JPEG quality (95)")
    cache.add_argument("--workers", type=int, default=1, help="resizing processes (1)")
    cache.add_argument("--quiet", action="store_true", help="no progress bar")
    cache.set_defaults(func=_cache)
