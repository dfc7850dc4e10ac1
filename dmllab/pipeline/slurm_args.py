"""The ``--executor slurm`` options that ``dmllab study`` and ``dmllab tune`` share: one definition of the flags
(:func:`add_slurm_arguments`) and of the :class:`~dmllab.pipeline.executors.SlurmOptions` they give
(:func:`slurm_options`). No heavy import here: the CLI builds its parser at every start."""

from __future__ import annotations

import argparse
from typing import Any


def add_slurm_arguments(
    parser: argparse.ArgumentParser, *, unit: str, time_min: int, gpus: int, cpus: int, gpus_note: str = ""
) -> None:
    """The SLURM flags of a command whose jobs are ``unit``s ("run", "trial"), with its defaults: the time limit
    per job in minutes, GPUs and CPUs per job (``gpus_note``: why the GPU default is what it is)."""
    slurm = parser.add_argument_group("slurm executor (submitit)")
    slurm.add_argument("--partition", help="SLURM partition")
    slurm.add_argument(
        "--time-min",
        type=int,
        default=time_min,
        help=f"time limit per {unit} in minutes (default {time_min})",
    )
    slurm.add_argument(
        "--gpus-per-job", type=int, default=gpus, help=f"GPUs per {unit} (default {gpus}{gpus_note})"
    )
    slurm.add_argument("--cpus-per-job", type=int, default=cpus, help=f"CPUs per {unit} (default {cpus})")
    slurm.add_argument("--array-parallelism", type=int, default=32, help=f"{unit}s at once (default 32)")
    slurm.add_argument("--slurm-folder", help="submitit logs (default results/slurm/<timestamp>/)")
    slurm.add_argument(  # tests: submitit's local executor
        "--slurm-cluster", choices=("slurm", "local", "debug"), default=None, help=argparse.SUPPRESS
    )


def slurm_options(args: argparse.Namespace) -> Any:
    """The :class:`~dmllab.pipeline.executors.SlurmOptions` of parsed :func:`add_slurm_arguments` flags."""
    from dmllab.pipeline.executors import SlurmOptions

    return SlurmOptions(
        partition=args.partition,
        time_min=args.time_min,
        gpus_per_job=args.gpus_per_job,
        cpus_per_job=args.cpus_per_job,
        array_parallelism=args.array_parallelism,
        folder=args.slurm_folder,
        cluster=args.slurm_cluster,
    )
