"""The ``--executor slurm`` options that ``dmllab study`` and ``dmllab tune`` share: one definition of the flags
(:func:`add_slurm_arguments`) and of the :class:`~dmllab.pipeline.slurm.SlurmOptions` they give
(:func:`slurm_options`). No heavy import here: the CLI builds its parser at every start."""

from __future__ import annotations

import argparse
from typing import Any


def add_slurm_arguments(parser: argparse.ArgumentParser, *, unit: str, time_min: int) -> None:
    """The SLURM flags of a command whose jobs are ``unit``s ("run", "trial"), with its time limit per job in
    minutes; what a job asks for by default is :func:`dmllab.pipeline.slurm.resources`."""
    from dmllab.pipeline.slurm import GPU_JOB_CPUS, GPU_JOB_GPUS, MIN_TIME_MIN, SlurmOptions
    from dmllab.profiles import GPU_PROFILES

    at_once, requeues = SlurmOptions.array_parallelism, SlurmOptions.max_requeues  # the defaults
    slurm = parser.add_argument_group("slurm executor (submitit)")
    slurm.add_argument("--partition", help="SLURM partition (default: the cluster's default partition)")
    slurm.add_argument(
        "--time-min",
        type=int,
        default=time_min,
        help=f"time limit per {unit} in minutes (default {time_min}, at least {MIN_TIME_MIN})",
    )
    slurm.add_argument(
        "--gpus-per-job",
        type=int,
        default=None,
        help=f"GPUs per {unit} (default: {GPU_JOB_GPUS} for the {'/'.join(GPU_PROFILES)} profile, 0 for the others)",
    )
    slurm.add_argument(
        "--cpus-per-job",
        type=int,
        default=None,
        help=f"CPUs per {unit} (default: 1 without a GPU, as a CPU run uses one thread; {GPU_JOB_CPUS} with one, "
        "at most a node's); checked against the partition's nodes (sinfo)",
    )
    slurm.add_argument(
        "--array-parallelism", type=int, default=at_once, help=f"{unit}s at once (default {at_once})"
    )
    slurm.add_argument(
        "--max-requeues",
        type=int,
        default=requeues,
        help=f"requeues of one {unit}'s job at most, preempted or out of time (default {requeues}; two copies in a "
        "row without a new epoch checkpoint also end it)",
    )
    slurm.add_argument(
        "--slurm-folder",
        help="where each submission's folder (pickles, sbatch script, logs) goes; it must be visible from the "
        "nodes (default results/tmp/; removed when the study's wait ends, the failures' logs moved to "
        "results/logs/)",
    )
    slurm.add_argument(  # tests: submitit's local executor
        "--slurm-cluster", choices=("slurm", "local", "debug"), default=None, help=argparse.SUPPRESS
    )


def slurm_options(args: argparse.Namespace) -> Any:
    """The :class:`~dmllab.pipeline.slurm.SlurmOptions` of parsed :func:`add_slurm_arguments` flags."""
    from dmllab.pipeline.slurm import SlurmOptions

    same = ("partition", "time_min", "gpus_per_job", "cpus_per_job", "array_parallelism", "max_requeues")
    return SlurmOptions(
        **{name: getattr(args, name) for name in same}, folder=args.slurm_folder, cluster=args.slurm_cluster
    )
