"""``dmllab study``, ``dmllab report`` and ``dmllab notebooks``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from dmllab.pipeline.slurm_args import add_slurm_arguments, slurm_options
from dmllab.profiles import PROFILES


def _study(args: argparse.Namespace) -> int:
    from dmllab.experiments import registry
    from dmllab.experiments.execution import Execution
    from dmllab.pipeline.cost import DEFAULT_CALIBRATION, load_calibration
    from dmllab.pipeline.fastdev import scratch_paths
    from dmllab.pipeline.outcome import format_summary
    from dmllab.pipeline.placement import plan_study
    from dmllab.pipeline.plan_text import format_plan
    from dmllab.pipeline.preflight import benchmark_runs
    from dmllab.pipeline.study import run_study

    execution = Execution(
        device=args.device or "auto",
        data_root=args.data_root,
        fast_dev_run=args.fast_dev_run,
        pretrained=None if args.pretrained == "preset" else False,
        check_counts=not args.no_counts,
    )
    selection = dict(seeds=args.seeds, datasets=args.datasets, max_gpu_hours=args.max_gpu_hours)
    if args.plan:
        with scratch_paths() if execution.fast_dev_run else contextlib.nullcontext():
            plan, placed = plan_study(
                registry.select(args.only),
                args.profile,
                execution,
                jobs=args.jobs,
                calibration=load_calibration(args.calibration or DEFAULT_CALIBRATION),
                **selection,
            )
            print(format_plan(plan, jobs=placed.workers))
        found, problems = benchmark_runs(plan)  # the paper plan says what it trains on the offline benchmark
        for line in found + problems:
            print(line)
        return 1 if plan.errors or problems else 0
    result = run_study(
        args.profile,
        execution,
        only=args.only,
        jobs=args.jobs,
        executor=args.executor,
        slurm=slurm_options(args),
        progress=not args.no_progress,
        force=args.force,
        calibration=args.calibration or DEFAULT_CALIBRATION,
        **selection,
    )
    print(format_summary(result), flush=True)
    if result.stopped:  # everything the study wrote is closed: skip the teardown (seconds with torch)
        sys.stderr.flush()
        os._exit(result.exit_code)
    return result.exit_code


def _report(args: argparse.Namespace) -> int:
    from dmllab import paths
    from dmllab.pipeline.report import build_report

    with paths.study():
        print(f"report: {build_report(args.profile)}")
    return 0


def _notebooks(args: argparse.Namespace) -> int:
    from dmllab.pipeline.docs import check_or_write
    from dmllab.pipeline.template import stale_notebooks, write_all

    fix = "out of date, with outputs, or without an artifact (run `dmllab notebooks`)"
    return check_or_write(args.check, stale_notebooks, write_all, fix, "all notebooks match their artifacts")


def _add_study(subparsers: argparse._SubParsersAction) -> None:
    """``dmllab study``."""
    study = subparsers.add_parser(
        "study",
        help="plan and train the artifacts' runs, run their notebooks, draw the figures, build the report",
        description="Plan the selected artifacts' training runs (de-duplicated by run key), train the missing "
        "ones (local process pool or SLURM through submitit), run each artifact's notebook with papermill "
        "(results/<artifact>.csv), run the plotting notebooks (figures/), build figures/report.html. "
        "Exit code 1 if a run or notebook failed; Ctrl-C or SIGTERM stops it within seconds (exit code 130 "
        "or 143) and the summary says what finished.",
    )
    study.add_argument("--profile", choices=PROFILES, default="quick", help="profile (default: quick)")
    study.add_argument("--only", metavar="PATTERN", help="comma-separated artifact ids, globs or substrings")
    study.add_argument(
        "--plan", action="store_true", help="print the plan (unique runs, stored, cost) and exit"
    )
    study.add_argument(
        "--executor",
        choices=("local", "slurm"),
        default="local",
        help="where missing runs train: local process pool, or SLURM jobs via submitit",
    )
    study.add_argument(
        "--jobs",
        default="auto",
        metavar="N|auto",
        help="local workers (runs and notebooks) at a time; on a GPU, N workers share the device; auto "
        "(default): one per usable core on the CPU (each run on one thread, so the numbers do not depend on the "
        "machine), on a GPU the worker count the calibration measured fastest (1 where none is); with --device "
        "auto on a machine with a GPU, the faster of the CPU pool and the GPU workers by measured rates",
    )
    study.add_argument(
        "--datasets",
        metavar="NAMES",
        help="the real datasets you have, comma-separated (cub,cars,sop,inshop): an artifact over several "
        "datasets runs on these only (its other rows are absent and its claims say so); one that needs none of "
        "them is left out",
    )
    study.add_argument(
        "--max-gpu-hours",
        type=float,
        metavar="H",
        help="train the artifacts in the papers' order of importance (headline tables first) while their GPU "
        "hours (the cost model, calibrated by --calibration) fit in H; the plan says what it left out",
    )
    study.add_argument(
        "--calibration",
        metavar="CSV",
        help="GPU rates for the cost model and the choice of device: a benchmarks/bench_gpu.py CSV (default: "
        "this checkout's committed results/benchmarks/gpu.csv)",
    )
    study.add_argument(
        "--data-root",
        metavar="D",
        help="the benchmark datasets (paper profile): D holds one folder per dataset, D/cub, D/cars, D/sop, "
        "D/inshop (as `dmllab data fetch NAME D/NAME` makes them), or is a single dataset's folder",
    )
    study.add_argument(
        "--fast-dev-run",
        nargs="?",
        type=int,
        const=2,
        default=0,
        metavar="N",
        help="check the study in minutes before spending GPU hours: every planned run (first seed) trains N "
        "batches per epoch (default 2), at most 1 warm-up + 1 epoch per stage, evaluates N batches, then the "
        "notebooks, plots and report run on those rows, all under results/fast-dev-run/ and "
        "figures/fast-dev-run/",
    )
    study.add_argument(
        "--no-counts",
        action="store_true",
        help="read the real datasets without checking their canonical image and class counts (a partial copy; "
        "as `dmllab data check --no-counts`)",
    )
    study.add_argument(
        "--pretrained",
        choices=("preset", "none"),
        default="preset",
        help="none: with --fast-dev-run, train from random initialisation (a machine without the ImageNet "
        "weights); preset (default): the weights the presets name",
    )
    study.add_argument(
        "--seeds",
        metavar="SEEDS",
        help="the seeds, a list such as 0,3,7 or a count N for 0..N-1 (each on its own draw of the benchmark on "
        "smoke/quick), for every artifact that runs several seeds, instead of the profile's (quick: 5); one-seed "
        "illustrations keep theirs",
    )
    study.add_argument("--device", help="auto | cpu | cuda | mps (default: auto)")
    study.add_argument("--no-progress", action="store_true", help="no progress bars")
    study.add_argument(
        "--force",
        action="store_true",
        help="run every notebook even when its code, parameters and runs are unchanged",
    )
    add_slurm_arguments(study, unit="run", time_min=240)
    study.set_defaults(func=_study)


def _add_report_and_notebooks(subparsers: argparse._SubParsersAction) -> None:
    """``dmllab report`` and ``dmllab notebooks``."""
    report = subparsers.add_parser(
        "report",
        help="build figures/report.html from results/",
        description="Build the HTML report of one profile from its CSVs and figures (what `dmllab study` does "
        "last): a summary of every claim's verdict, then each paper's artifacts with their figures, "
        "reproduced numbers, the paper's numbers and verdicts. The quick profile's report is "
        "figures/report.html; another profile's is figures/scratch/<profile>/report.html.",
    )
    report.add_argument(
        "--profile", choices=PROFILES, default=None, help="default: paper, quick or smoke, as present"
    )
    report.set_defaults(func=_report)

    notebooks = subparsers.add_parser(
        "notebooks",
        help="regenerate notebooks/*.ipynb from the artifacts",
        description="Write every artifact's notebook and each paper's plotting notebook from the artifact "
        "registry (without outputs), and remove those of artifacts that no longer exist; --check only says "
        "which are out of date (exit code 1).",
    )
    notebooks.add_argument(
        "--check", action="store_true", help="only check that the notebooks are up to date"
    )
    notebooks.set_defaults(func=_notebooks)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``study``, ``report``, ``notebooks`` and ``docs`` on the ``dmllab`` parser."""
    from dmllab.pipeline.docs import add_command as add_docs_command

    _add_study(subparsers)
    _add_report_and_notebooks(subparsers)
    add_docs_command(subparsers)
