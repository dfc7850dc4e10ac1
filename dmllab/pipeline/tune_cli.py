"""``dmllab tune``: the equal-budget search on validation for every method a study trains (:mod:`dmllab.pipeline.tune`).
Expected user errors are one line on stderr with exit status 2 (:func:`dmllab.cli.main`), never a traceback."""

from __future__ import annotations

import argparse

from dmllab.pipeline.slurm_args import add_slurm_arguments, slurm_options


def cmd_tune(args: argparse.Namespace) -> int:
    """``dmllab tune``: :mod:`dmllab.pipeline.tune`."""
    from dmllab.pipeline import tune

    methods = [m.strip() for m in (args.methods or "").split(",") if m.strip()] or None
    if args.list:
        print(tune.format_spaces(tune.search_spaces(methods, args.profile)))
        return 0
    result = tune.tune(
        methods,
        profile=args.profile,
        trials=args.trials,
        batch=args.batch,
        seed=args.seed,
        run_seed=args.run_seed,
        jobs=args.jobs,
        executor=args.executor,
        slurm=slurm_options(args),
        progress=not args.quiet,
    )
    print(tune.format_result(result))
    return 1 if result.failed else 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``tune`` on the ``dmllab`` parser."""
    p = sub.add_parser(
        "tune",
        help="equal-budget hyper-parameter search on the validation split for every method the study trains",
        description="Search the hyper-parameters of every method the study trains (or --methods) with the same "
        "number of trials each (Optuna's TPE sampler), each trial a run of the run store judged by its "
        "validation R@1; the trials are written to results/tuning/<profile>.csv and the chosen recipes to the "
        "presets' recipes file (dmllab/training/presets/recipes/<profile>.csv).",
    )
    p.add_argument(
        "--profile", default="quick", help="the study profile whose methods are tuned (default quick)"
    )
    p.add_argument(
        "--methods", default=None, help="comma-separated methods (default: every method of the study)"
    )
    p.add_argument("--trials", type=int, default=20, help="trials per method (default 20)")
    p.add_argument(
        "--batch",
        type=int,
        default=4,
        help="trials asked at once per method (default 4; the trials depend on it)",
    )
    p.add_argument("--seed", type=int, default=0, help="the TPE sampler's seed (default 0)")
    p.add_argument("--run-seed", type=int, default=0, help="the trials' training seed (default 0)")
    p.add_argument(
        "--jobs",
        default="auto",
        metavar="N|auto",
        help="local workers; auto (default): one per usable core (each trial on one thread)",
    )
    p.add_argument(
        "--executor",
        choices=("local", "slurm"),
        default="local",
        help="where the trials train: local process pool (default), or SLURM jobs via submitit",
    )
    p.add_argument("--list", action="store_true", help="print the methods and their search spaces and stop")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_slurm_arguments(p, unit="trial", time_min=60)
    p.set_defaults(func=cmd_tune)
