"""``dmllab study``: plan, train, notebooks, plots, report.

1. **plan** (:mod:`dmllab.pipeline.plan`): the selected artifacts' runs, placed and de-duplicated, with what is
   stored and an estimate (``--plan`` prints it and stops);
2. **train** the missing runs on an executor (:mod:`dmllab.pipeline.executors`): ``local`` (a process pool,
   ``--jobs auto``: one worker per usable core on the CPU) or ``slurm`` (one submitit job per run);
3. **notebooks** (:mod:`dmllab.pipeline.execute`): each artifact's notebook runs with papermill, reads the stored
   runs only (``train_missing=False``) and writes ``<artifact>.csv``; a notebook whose code, parameters
   and runs are unchanged since its last success is skipped;
4. **plots**: ``notebooks/plots_<paper>.ipynb`` reads only the CSVs and writes the paper's figures;
5. **report**: ``report.html`` beside the figures.

The CSVs and figures go to :func:`dmllab.paths.destination`: the committed ``results/`` and ``figures/`` for the
committed profile on the committed device (quick, cpu), else the git-ignored ``results/scratch/<profile>/`` and
``figures/scratch/<profile>/`` (said before training). A re-run whose values are unchanged rewrites no file.

A failing run or notebook is reported with its error and never stops the others. Ctrl-C or SIGTERM stops the
study within seconds, workers and notebook kernels included, and the summary says what finished. Before training,
the study checks once what every run to train needs (:func:`preflight`: the ImageNet weights in torchvision's cache,
each real dataset's index files) and stops with one line per problem instead of failing every run alike.

``fast_dev_run=N`` (``dmllab study --fast-dev-run``) checks a study in minutes before spending GPU hours
(:mod:`dmllab.pipeline.fastdev`): every step as above, with fast dev runs, in scratch folders.
``pretrained=False`` (``--pretrained none``, fast dev runs only) trains from random initialisation;
``check_counts=False`` (``--no-counts``) reads partial copies of the real datasets; ``seeds=N`` (``--seeds``) runs
seeds 0..N-1 of every artifact that runs several seeds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from dmllab import paths
from dmllab.experiments import registry
from dmllab.numerics import stale_cache_message
from dmllab.pipeline import execute
from dmllab.pipeline.cost import DEFAULT_CALIBRATION, load_calibration
from dmllab.pipeline.executors import LocalExecutor
from dmllab.pipeline.fastdev import check_fast_dev, fast_dev_header, scratch_paths
from dmllab.pipeline.jobs import Interrupted, JobResult, quiet, stop_on_signals
from dmllab.pipeline.outcome import StudyResult
from dmllab.pipeline.placement import plan_study
from dmllab.pipeline.plan import Plan
from dmllab.pipeline.plan_text import estimate
from dmllab.pipeline.preflight import preflight
from dmllab.pipeline.slurm import SlurmExecutor, SlurmOptions

EXECUTORS = ("local", "slurm")


def run_study(
    profile: str = "quick",
    *,
    only: str | None = None,
    jobs: int | str = "auto",
    executor: str = "local",
    slurm: SlurmOptions | None = None,
    data_root: str | None = None,
    device: str | None = None,
    notebooks_dir: str | os.PathLike | None = None,
    executed_dir: str | os.PathLike | None = None,
    progress: bool = True,
    report: bool = True,
    force: bool = False,
    say: Callable[[str], None] = print,
    fast_dev_run: int = 0,
    pretrained: bool | None = None,
    check_counts: bool = True,
    seeds: int | None = None,
    datasets: str | None = None,
    max_gpu_hours: float | None = None,
    calibration: str | os.PathLike = DEFAULT_CALIBRATION,
) -> StudyResult:
    """Plan, train, run the notebooks, draw the figures and build the report (module docstring); with
    ``fast_dev_run`` all of it as a fast dev run, in :func:`scratch_paths`. Where the runs train is chosen by
    :func:`dmllab.pipeline.placement.plan_study` from the GPU ``calibration`` (a ``bench_gpu.py`` CSV), which also
    prices the runs; ``datasets`` (comma-separated) and ``max_gpu_hours`` leave artifacts out
    (:mod:`dmllab.pipeline.budget`).

    Raises:
        ValueError: an unknown profile, executor or dataset, ``jobs`` neither "auto" nor a positive integer,
            ``only`` matching no artifact, a negative ``fast_dev_run``, ``pretrained=False`` without
            ``fast_dev_run``, or a calibration that cannot be read.
    """
    check_fast_dev(fast_dev_run, pretrained)
    options = dict(locals())
    with scratch_paths() if fast_dev_run else paths.study():
        return _run(**options)


def _run(
    profile: str,
    *,
    only: str | None,
    jobs: int | str,
    executor: str,
    slurm: SlurmOptions | None,
    data_root: str | None,
    device: str | None,
    notebooks_dir: str | os.PathLike | None,
    executed_dir: str | os.PathLike | None,
    progress: bool,
    report: bool,
    force: bool,
    say: Callable[[str], None],
    fast_dev_run: int,
    pretrained: bool | None,
    check_counts: bool,
    seeds: int | None,
    datasets: str | None,
    max_gpu_hours: float | None,
    calibration: str | os.PathLike,
) -> StudyResult:
    from dmllab.pipeline.template import notebooks_dir as default_notebooks

    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; valid executors: {', '.join(EXECUTORS)}")
    gpu_rates = load_calibration(calibration)
    artifacts = registry.select(only)
    quiet()
    start = time.perf_counter()
    phase_s: dict[str, float] = {}
    done: dict[str, list[JobResult]] = {"train": [], "notebooks": [], "plots": []}
    plan, built, stopped, step = Plan(profile, tuple(artifacts), (), 0), None, None, "plan"
    problems: list[str] = []
    checked: list[str] = []
    local = LocalExecutor(1, progress=progress)
    nb_dir = Path(notebooks_dir) if notebooks_dir is not None else default_notebooks()
    out_dir = Path(executed_dir) if executed_dir is not None else paths.results_dir() / "executed" / profile

    def finished(name: str, next_step: str) -> str:
        phase_s[name] = time.perf_counter() - start - sum(phase_s.values())
        return next_step

    with stop_on_signals():
        try:
            stale = stale_cache_message(paths.cache_dir(), paths.runs_dir())
            if stale:
                say(f"WARNING: {stale}")
            plan, placed = plan_study(
                artifacts,
                profile,
                device=device,
                jobs=jobs,
                calibration=gpu_rates,
                data_root=data_root,
                fast_dev_run=fast_dev_run,
                pretrained=pretrained,
                check_counts=check_counts,
                seeds=seeds,
                datasets=datasets,
                max_gpu_hours=max_gpu_hours,
            )
            local = LocalExecutor(placed.workers, threads=placed.threads, progress=progress)
            where = paths.destination(profile, placed.device)
            if fast_dev_run:
                say(fast_dev_header(plan))
            elif not where.tracked:
                say(f"{profile} on {placed.device}: {where.note()}")
            say(placed.line)
            say(
                f"plan: {len(plan.runs)} unique runs, {len(plan.stored)} stored, "
                + (f"{len(plan.diverged)} recorded as diverged, " if plan.diverged else "")
                + f"{len(plan.missing)} to train (estimate {estimate(plan, placed.workers)})"
            )
            if plan.left_out:
                say(f"left out: {', '.join(f'{a} ({why})' for a, why in plan.left_out.items())}")
            checked, problems = preflight(plan)
            for line in checked:
                say(line)
            if problems:
                raise _Stop()
            step = finished("plan", "train")
            trainer = SlurmExecutor(slurm, progress=progress, say=say) if executor == "slurm" else local
            done["train"] = trainer.submit([r.run for r in plan.missing], desc=f"train ({profile})")
            step = finished("train", "notebooks")
            done["notebooks"] = execute.run_notebooks(plan, local, nb_dir, out_dir, force)
            step = finished("notebooks", "plots")
            done["plots"] = execute.run_plots(plan, local, nb_dir, out_dir, done["notebooks"], force)
            step = finished("plots", "report")
            if report:
                from dmllab.pipeline.report import build_report

                built = build_report(profile, results=where.results, figures=where.figures)
            finished("report", "")
        except Interrupted as stop:
            stopped = stop.signum
            if step in done:
                done[step] = list(stop.finished)
        except _Stop:
            pass
    return StudyResult(
        plan,
        tuple(done["train"]),
        tuple(done["notebooks"]),
        tuple(done["plots"]),
        built,
        time.perf_counter() - start,
        phase_s,
        stopped,
        tuple(problems),
        tuple(checked),
    )


class _Stop(Exception):
    """The preflight found problems: the study stops before training."""
