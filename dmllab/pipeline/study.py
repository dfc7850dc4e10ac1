"""``dmllab study``: plan (:mod:`dmllab.pipeline.plan`, the manifest of the placed runs, the preflight), prepare
(the pre-trained SmallCNN trunks), train the missing runs on an executor (:mod:`dmllab.pipeline.executors`), run
the notebooks and the plots (:mod:`dmllab.pipeline.execute`), build the report; where the files go, how a failure
or a signal stops it, and ``--fast-dev-run`` (:mod:`dmllab.pipeline.fastdev`) are described in docs/guide/study.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.experiments import registry
from dmllab.experiments.execution import Execution
from dmllab.numerics import stale_cache_message
from dmllab.pipeline import execute
from dmllab.pipeline.cost import DEFAULT_CALIBRATION, load_calibration
from dmllab.pipeline.executors import LocalExecutor
from dmllab.pipeline.fastdev import fast_dev_header, scratch_paths
from dmllab.pipeline.jobs import Interrupted, JobResult, quiet, stop_on_signals
from dmllab.pipeline.outcome import StudyResult
from dmllab.pipeline.placement import plan_study
from dmllab.pipeline.plan import Plan, write_manifest
from dmllab.pipeline.plan_text import estimate, trunks_text
from dmllab.pipeline.preflight import preflight
from dmllab.pipeline.slurm import SlurmExecutor, SlurmOptions
from dmllab.training.pretrain import ensure_pretrained_smallcnn

EXECUTORS = ("local", "slurm")


def run_study(
    profile: str = "quick",
    execution: Execution = Execution(),
    *,
    only: str | None = None,
    jobs: int | str = "auto",
    executor: str = "local",
    slurm: SlurmOptions | None = None,
    notebooks_dir: str | os.PathLike | None = None,
    executed_dir: str | os.PathLike | None = None,
    progress: bool = True,
    report: bool = True,
    force: bool = False,
    say: Callable[[str], None] = print,
    seeds: Any = None,
    datasets: str | None = None,
    max_gpu_hours: float | None = None,
    calibration: str | os.PathLike = DEFAULT_CALIBRATION,
) -> StudyResult:
    """Plan, train, run the notebooks, draw the figures and build the report (module docstring) in ``execution``
    (a fast dev run in :func:`scratch_paths`), placed by :func:`dmllab.pipeline.placement.plan_study` from the GPU
    ``calibration`` (a ``bench_gpu.py`` CSV); ``seeds``, ``datasets`` and ``max_gpu_hours`` as ``dmllab study``'s.

    Raises:
        ValueError: an unknown profile, executor or dataset, ``jobs`` neither "auto" nor a positive integer,
            ``only`` matching no artifact, or a calibration that cannot be read.
    """
    from dmllab.pipeline.template import notebooks_dir as default_notebooks

    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; valid executors: {', '.join(EXECUTORS)}")
    study = _Study(
        profile,
        execution,
        registry.select(only),
        load_calibration(calibration),
        Path(notebooks_dir) if notebooks_dir is not None else default_notebooks(),
        executed_dir,
        say,
    )
    with scratch_paths() if execution.fast_dev_run else paths.study():
        return study.run(
            jobs=jobs,
            trainer=SlurmExecutor(slurm, progress=progress, say=say) if executor == "slurm" else None,
            progress=progress,
            report=report,
            force=force,
            plan_options=dict(seeds=seeds, datasets=datasets, max_gpu_hours=max_gpu_hours),
        )


@dataclass
class _Study:
    """One study's steps in order (module docstring), its phases timed, a stop by signal or preflight kept."""

    profile: str
    execution: Execution
    artifacts: list[Any]
    calibration: Any
    nb_dir: Path
    executed_dir: str | os.PathLike | None
    say: Callable[[str], None]
    phase_s: dict[str, float] = field(default_factory=dict)
    start: float = field(default_factory=time.perf_counter)

    def finished(self, name: str, next_step: str) -> str:
        self.phase_s[name] = time.perf_counter() - self.start - sum(self.phase_s.values())
        return next_step

    def prepare(self, plan: Plan, progress: bool) -> None:
        """Pre-train the SmallCNN trunks the missing runs start from (a planned dependency, once each, before the
        workers start, rather than inside the first run of each draw)."""
        trunks = plan.dependencies
        if trunks:
            self.say(f"prepared first: {trunks_text(trunks)}")
        for width, draw in trunks:
            ensure_pretrained_smallcnn(width=width, progress=progress, seed=draw)

    def run(
        self,
        *,
        jobs: int | str,
        trainer: Any,
        progress: bool,
        report: bool,
        force: bool,
        plan_options: dict[str, Any],
    ) -> StudyResult:
        profile, say = self.profile, self.say
        out_dir = Path(self.executed_dir or paths.results_dir() / "executed" / profile)
        quiet()
        done: dict[str, list[JobResult]] = {"train": [], "notebooks": [], "plots": []}
        plan, built, stopped, step = Plan(profile, tuple(self.artifacts), (), 0), None, None, "plan"
        problems: list[str] = []
        checked: list[str] = []
        with stop_on_signals():
            try:
                stale = stale_cache_message(paths.cache_dir(), paths.runs_dir())
                if stale:
                    say(f"WARNING: {stale}")
                plan, placed = plan_study(
                    self.artifacts,
                    profile,
                    self.execution,
                    jobs=jobs,
                    calibration=self.calibration,
                    **plan_options,
                )
                local = LocalExecutor(placed.workers, threads=placed.threads, progress=progress)
                where = paths.destination(profile, placed.device)
                if plan.fast_dev_run:
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
                checked, problems = preflight(plan, self.nb_dir)
                for line in checked:
                    say(line)
                if problems:
                    raise _Stop()
                say(f"manifest of the placed runs: {write_manifest(plan)}")
                step = self.finished("plan", "prepare")
                self.prepare(plan, progress)
                step = self.finished("prepare", "train")
                done["train"] = (trainer or local).submit(
                    [r.run for r in plan.missing], desc=f"train ({profile})"
                )
                step = self.finished("train", "notebooks")
                done["notebooks"] = execute.run_notebooks(plan, local, self.nb_dir, out_dir, force)
                step = self.finished("notebooks", "plots")
                done["plots"] = execute.run_plots(plan, local, self.nb_dir, out_dir, done["notebooks"], force)
                step = self.finished("plots", "report")
                if report:
                    from dmllab.pipeline.report import build_report

                    built = build_report(profile, results=where.results, figures=where.figures)
                self.finished("report", "")
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
            time.perf_counter() - self.start,
            self.phase_s,
            stopped,
            tuple(problems),
            tuple(checked),
        )


class _Stop(Exception):
    """The preflight found problems: the study stops before training."""
