"""``dmllab study``: plan, train, notebooks, plots, report.

1. **plan** (:mod:`dmllab.pipeline.plan`): the selected artifacts' runs, placed and de-duplicated, with what is
   stored and an estimate (``--plan`` prints it and stops);
2. **train** the missing runs on an executor (:mod:`dmllab.pipeline.executors`): ``local`` (a process pool,
   ``--jobs auto``: one worker per usable core on the CPU) or ``slurm`` (one submitit job per run);
3. **notebooks** (:mod:`dmllab.pipeline.execute`): each artifact's notebook runs with papermill, reads the stored
   runs only (``train_missing=False``) and writes ``results/<artifact>.csv``; a notebook whose code, parameters
   and runs are unchanged since its last success is skipped;
4. **plots**: ``notebooks/plots_<paper>.ipynb`` reads only the CSVs and writes the paper's figures;
5. **report**: ``figures/report.html``.

A failing run or notebook is reported with its error and never stops the others. Ctrl-C or SIGTERM stops the
study within seconds, workers and notebook kernels included, and the summary says what finished.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dmllab import paths
from dmllab.experiments import registry
from dmllab.numerics import stale_cache_message
from dmllab.pipeline import execute
from dmllab.pipeline.executors import (
    Interrupted,
    JobResult,
    LocalExecutor,
    SlurmExecutor,
    SlurmOptions,
    quiet,
    resolve_jobs,
    stop_on_signals,
    threads_per_worker,
)
from dmllab.pipeline.plan import Plan, estimate, make_plan
from dmllab.profiles import resolve_device

EXECUTORS = ("local", "slurm")


@dataclass(frozen=True)
class StudyResult:
    plan: Plan
    training: tuple[JobResult, ...]
    notebooks: tuple[JobResult, ...]
    plots: tuple[JobResult, ...]
    report: Path | None
    wall_s: float
    # Wall time of each step, in order (plan, train, notebooks, plots, report), seconds.
    phase_s: Mapping[str, float] = field(default_factory=dict)
    stopped: int | None = None  # the signal that stopped the study (SIGINT, SIGTERM); None: it ran to the end

    @property
    def failed(self) -> bool:
        return any(r.status == "FAILED" for r in self.training + self.notebooks + self.plots) or bool(
            self.plan.errors
        )

    @property
    def exit_code(self) -> int:
        """128 + the signal when stopped (130 for Ctrl-C), 1 when a run, notebook or plan failed, else 0."""
        return 128 + int(self.stopped) if self.stopped else int(self.failed)


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
) -> StudyResult:
    """Plan, train, run the notebooks, draw the figures and build the report (module docstring).

    Raises:
        ValueError: an unknown profile or executor, ``jobs`` neither "auto" nor a positive integer, or ``only``
            matching no artifact.
    """
    from dmllab.pipeline.template import notebooks_dir as default_notebooks

    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; valid executors: {', '.join(EXECUTORS)}")
    resolved_device = resolve_device(device or "auto")
    workers = resolve_jobs(jobs, resolved_device)
    artifacts = registry.select(only)
    quiet()
    start = time.perf_counter()
    phase_s: dict[str, float] = {}
    done: dict[str, list[JobResult]] = {"train": [], "notebooks": [], "plots": []}
    plan, built, stopped, step = Plan(profile, tuple(artifacts), (), 0), None, None, "plan"
    local = LocalExecutor(workers, threads=threads_per_worker(resolved_device, workers), progress=progress)
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
            plan = make_plan(artifacts, profile, device=resolved_device, data_root=data_root)
            say(
                f"plan: {len(plan.runs)} unique runs, {len(plan.stored)} stored, "
                + (f"{len(plan.diverged)} recorded as diverged, " if plan.diverged else "")
                + f"{len(plan.missing)} to train (estimate {estimate(plan, workers)})"
            )
            step = finished("plan", "train")
            trainer = SlurmExecutor(slurm, progress=progress) if executor == "slurm" else local
            done["train"] = trainer.submit([r.run for r in plan.missing], desc=f"train ({profile})")
            step = finished("train", "notebooks")
            done["notebooks"] = execute.run_notebooks(
                plan, local, nb_dir, out_dir, resolved_device, data_root, force
            )
            step = finished("notebooks", "plots")
            done["plots"] = execute.run_plots(plan, local, nb_dir, out_dir, done["notebooks"], force)
            step = finished("plots", "report")
            if report:
                from dmllab.pipeline.report import build_report

                built = build_report(profile)
            finished("report", "")
        except Interrupted as stop:
            stopped = stop.signum
            if step in done:
                done[step] = list(stop.finished)
    return StudyResult(
        plan,
        tuple(done["train"]),
        tuple(done["notebooks"]),
        tuple(done["plots"]),
        built,
        time.perf_counter() - start,
        phase_s,
        stopped,
    )


def format_summary(result: StudyResult) -> str:
    """Plain-text summary: one line per notebook and plotting notebook, training totals, then every failure."""
    lines = []
    if result.stopped:
        lines.append(
            f"STOPPED by {signal.Signals(result.stopped).name}: what finished before is listed below; "
            "run the same command again to go on (finished runs and notebooks are kept)"
        )
    ok_runs = sum(r.status == "ok" for r in result.training)
    diverged = [r for r in result.training if r.status == "diverged"]
    lines.append(
        f"training: {ok_runs} trained, {len(diverged)} diverged, "
        f"{len(result.training) - ok_runs - len(diverged)} failed, "
        f"{len(result.plan.runs) - len(result.plan.missing)} reused from the run store "
        f"({len(result.plan.diverged)} of them recorded as diverged) "
        f"({sum(r.wall_s for r in result.training):.0f} s of training)"
    )
    rows = list(result.notebooks) + list(result.plots)
    width = max([len("notebook")] + [len(r.name) for r in rows])
    lines.append(f"{'notebook':<{width}}  {'status':<6}  {'wall':>8}")
    lines.append(f"{'-' * width}  ------  --------")
    lines += [f"{r.name:<{width}}  {'cached' if r.cached else r.status:<6}  {r.wall_s:>7.1f}s" for r in rows]
    failed = [r for r in list(result.training) + rows if r.status == "FAILED"]
    lines.append(
        f"{len(rows) - sum(r.status != 'ok' for r in rows)} notebooks ok, "
        f"{sum(r.status != 'ok' for r in rows)} failed; study wall time {result.wall_s:.0f} s"
    )
    if result.phase_s:
        lines.append("steps: " + ", ".join(f"{k} {v:.0f} s" for k, v in result.phase_s.items()))
    for artifact, error in result.plan.errors.items():
        lines.append(f"\nFAILED planning {artifact}: {error}")
    for r in diverged:
        lines.append(f"\ndiverged (recorded in the run store, its rows say `diverged`) {r.name}: {r.error}")
    for r in failed:
        where = f" (cell {r.cell})" if r.cell is not None else ""
        lines.append(f"\nFAILED {r.name}{where}: {r.error}")
        if r.output:
            lines.append(f"  see: {r.output}")
    if result.report is not None:
        lines.append(f"\nreport: {result.report}")
    return "\n".join(lines)
